package txboxmigrate

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/txbox/txbox/txboxdriver"
)

// A bare io.EOF from one of the Migrator's statements (its connection
// closed between two messages) is the database's failure: lost makes it
// one txboxdriver.IsTransient accepts, and keeps the cause in the message.
func TestLostConnIsTransient(t *testing.T) {
	err := fmt.Errorf("read txbox_migrations: %w", io.EOF)
	if txboxdriver.IsTransient(err) {
		t.Fatal("a bare EOF is transient without lost; the test proves nothing")
	}
	got := lost(err)
	if !txboxdriver.IsTransient(got) || !errors.Is(got, io.EOF) {
		t.Fatalf("lost(%v) = %v: transient %v", err, got, txboxdriver.IsTransient(got))
	}
	if !strings.Contains(got.Error(), "connection was lost") || !strings.Contains(got.Error(), "EOF") {
		t.Fatalf("message %q does not name the cause", got)
	}
	if lost(got) != got {
		t.Fatal("lost wraps twice")
	}
	other := errors.New("syntax error")
	if lost(other) != other || lost(nil) != nil {
		t.Fatal("lost changes an error that is no EOF")
	}
}
