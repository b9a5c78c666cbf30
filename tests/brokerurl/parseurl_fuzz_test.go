// Package brokerurl_test fuzzes the broker adapters' ParseURL functions
// together: none panics, and no error quotes a piece of a password.
package brokerurl_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/txboxasynq"
	"github.com/txbox/txbox/txboxkafka"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// canary is put in every password; no error may hold one of its letters,
// which nothing else in the URL holds and no error text of the adapters
// or their SDKs uses.
const canary = "ZJ"

var schemes = []string{"nats", "tls", "ws", "amqp", "amqps", "redis", "rediss", "asynq+redis", "kafka", "http", ""}

// FuzzParseURLPasswords builds URLs from a scheme, a user, a password
// holding the canary, a host list and a rest, in the shapes people write
// (scheme://user:pw@host/rest, a list of servers, no scheme), and parses
// each with every adapter's ParseURL.
func FuzzParseURLPasswords(f *testing.F) {
	for _, s := range []struct {
		form                 uint8
		user, pw, host, rest string
	}{
		{0, "u", "pw", "h:4222", ""}, {1, "u", "p/w", "h:bad", "0"}, {2, "", "a%zz", "h", "?maxlen=1"},
		{3, "u", "a,b", "a:1,b:2", ""}, {4, "u", "p#w", "h:6379", "0?queue=q"}, {5, "u", "p w", "[::1]:5672", "vh"},
		{6, "u", "p?w", "h", ""}, {7, "u:x", "p@w", "h:9092", ""}, {8, "u", "%", "h:1", "x#y"},
		{5, "u", "pw", "h:6379", ""}, {8, "u", "pw", "h:9092", ""}, {9, "u", "pw", "h:1", ""},
	} {
		f.Add(s.form, s.user, s.pw, s.host, s.rest)
	}
	f.Fuzz(func(t *testing.T, form uint8, user, pw, host, rest string) {
		for _, part := range []string{user, host, rest} {
			if spellsCanary(part) {
				return // only the password may hold the canary's letters
			}
		}
		if spellsCanary(pw) {
			return
		}
		at := int(form/16) % (len(pw) + 1)
		pw = pw[:at] + canary + pw[at:]
		scheme := schemes[int(form)%len(schemes)]
		var raw string
		switch form % 3 {
		case 0:
			raw = fmt.Sprintf("%s://%s:%s@%s/%s", scheme, user, pw, host, rest)
		case 1:
			raw = fmt.Sprintf("%s://%s,%s:%s@%s/%s", scheme, host, user, pw, host, rest)
		default:
			raw = fmt.Sprintf("%s:%s@%s", user, pw, host)
			if scheme != "" {
				raw = scheme + "://" + raw
			}
		}
		var errs []error
		_, err := natsjs.ParseURL(raw)
		errs = append(errs, err)
		_, err = txboxrabbitmq.ParseURL(raw)
		errs = append(errs, err)
		_, _, err = redisstream.ParseURL(raw)
		errs = append(errs, err)
		_, _, err = txboxasynq.ParseURL(raw)
		errs = append(errs, err)
		_, err = txboxkafka.ParseURL(raw)
		errs = append(errs, err)
		for _, err := range errs {
			if err == nil {
				continue
			}
			if msg := err.Error(); spellsCanary(msg) {
				t.Fatalf("ParseURL(%q): the error holds a piece of the password %q: %s", raw, pw, msg)
			}
		}
	})
}

// spellsCanary reports whether s holds a letter of canary, as written or
// percent-encoded (%5A, %4A in either case).
func spellsCanary(s string) bool {
	if strings.ContainsAny(s, canary) {
		return true
	}
	u := strings.ToUpper(s)
	for _, c := range canary {
		if strings.Contains(u, fmt.Sprintf("%%%02X", c)) {
			return true
		}
	}
	return false
}
