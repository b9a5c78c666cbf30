package brokerurl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"nats://u:pw@h:4222", "nats://u:xxxxx@h:4222"},
		{"nats://u:p/w@h:bad", "nats://u:xxxxx@h:bad"},
		{"redis://:pw@h/0", "redis://:xxxxx@h/0"},
		{"u:pw@h:4222", "u:xxxxx@h:4222"},
		{"nats://u@h:4222", "nats://u@h:4222"},
		{"nats://h:4222", "nats://h:4222"},
	} {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Parse's errors say what is wrong and hold no piece of the password.
func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"nats://u:s3cr3t@h:bad", `invalid port ":bad" after host`},
		{"nats://u:s3/cr3t@h:4222", "must be percent-encoded"},
		{"nats://u:s3%zzcr3t@h:4222", "invalid %-escape in the user name or password"},
		{"nats://h:4222/%zz", "invalid URL escape"},
		// a password= parameter (a key/value DSN): url.Parse quotes "%zz"
		{"user=u password=s3%zzcr3t", "invalid %-escape in the user name or password"},
		// the second URL of a list
		{"nats://h1:4222, nats://u:s3/cr3t@h2:4222", "must be percent-encoded"},
	} {
		_, err := Parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", c.in, err, c.want)
		} else if strings.Contains(err.Error(), "cr3t") || strings.Contains(err.Error(), "s3") {
			t.Errorf("Parse(%q): error holds a piece of the password: %v", c.in, err)
		}
	}
	if u, err := Parse("nats://u:pw@h:4222"); err != nil || u.Host != "h:4222" {
		t.Errorf("Parse = %v, %v", u, err)
	}
}

func TestListSplitsPassword(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"nats://a:4222,nats://u:p,w@b:4222": true,
		"nats://u:p,w@b:4222":               true,
		"nats://u:pw@a:4222,nats://b:4222":  false,
		"nats://a:4222, b:4222":             false,
	} {
		if got := ListSplitsPassword(in); got != want {
			t.Errorf("ListSplitsPassword(%q) = %t, want %t", in, got, want)
		}
	}
}

func TestScrub(t *testing.T) {
	t.Parallel()
	got := Scrub(`dial "p@ss": p@ss and p%40ss`, "redis://u:p%40ss@h/0")
	if strings.Contains(got, "p@ss") || strings.Contains(got, "p%40ss") {
		t.Errorf("Scrub left the password: %s", got)
	}
}

// Error masks the password in the message and keeps the chain.
func TestError(t *testing.T) {
	t.Parallel()
	base := errors.New("dial nats://u:s3cr%2Ft@h:4222: refused for s3cr/t")
	err := Error(fmt.Errorf("connect: %w", base), "nats://u:s3cr%2Ft@h:4222")
	if strings.Contains(err.Error(), "s3cr") {
		t.Errorf("Error kept the password: %q", err)
	}
	if !errors.Is(err, base) {
		t.Errorf("Error lost the chain: %v", err)
	}
	if Error(nil, "nats://u:p@h") != nil {
		t.Error("Error(nil) is not nil")
	}
}
