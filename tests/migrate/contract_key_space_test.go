package migrate_test

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
)

// A dead row with an empty ordering_key or a topic with U+3000 (parked, or
// written dead by hand: the rules bind only rows still to deliver) cannot
// be redriven: made pending again, it must obey the message's rules (on
// SQLite the contract_redrive trigger).
func TestContractRefusesRedriveOfKeySpace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, x := range databases(t) {
		t.Run(string(x.d), func(t *testing.T) {
			up(t, x)
			now := any(time.Now().UTC())
			if x.d == txboxdriver.SQLite {
				now = time.Now().UnixMicro()
			}
			insert(t, x, "topic, ordering_key, payload, dead_at", "t", "", []byte("dead key"), now)
			insert(t, x, "topic, payload, dead_at", "a\u3000b", []byte("dead topic"), now)
			if err := exec(ctx, x.db, x.d, "UPDATE txbox_outbox SET dead_at = NULL WHERE ordering_key = ''"); err == nil {
				t.Error("redrive of a dead row with ordering_key '' accepted")
			}
			if err := exec(ctx, x.db, x.d, "UPDATE txbox_outbox SET dead_at = NULL WHERE ordering_key IS NULL"); err == nil {
				t.Error("redrive of a dead row with a topic with U+3000 accepted")
			}
			var n int
			testenv.Must(t, x.db.QueryRowContext(ctx, "SELECT count(*) FROM txbox_outbox WHERE dead_at IS NOT NULL").Scan(&n), "count")
			if n != 2 {
				t.Fatalf("%d dead rows, want 2", n)
			}
		})
	}
}
