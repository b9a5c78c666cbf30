package natsjs_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/txbox/txbox/natsjs"
)

// ParseURL returns each server of a list as a URL and refuses what nats.go
// would misread, with errors that hold no password.
func TestParseURL(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3tQZJ"
	for _, c := range []struct {
		url  string
		want []string
		err  string
	}{
		{"nats://127.0.0.1:4222", []string{"nats://127.0.0.1:4222"}, ""},
		{"nats://a:4222, b:4222,tls://c:4222", []string{"nats://a:4222", "nats://b:4222", "tls://c:4222"}, ""},
		{"tls://u:" + secret + "@h:4222", []string{"tls://u:" + secret + "@h:4222"}, ""},
		{"wss://h:443", []string{"wss://h:443"}, ""},
		{"127.0.0.1:4222", nil, "want a URL"},
		{"nats://u:" + secret + "@h:bad", nil, `server "nats://u:xxxxx@h:bad": malformed URL`},
		{"nats://a:4222,nats://u:" + secret + "@h:bad", nil, "malformed URL"},
		{"nats://u:" + secret + "/x@h:4222", nil, "must be percent-encoded"},
		{"nats://u:a,b" + secret + "@h:4222", nil, "a ',' in a password"},
		{"http://h:4222", nil, `unsupported scheme "http"`},
		{"nats://", nil, `server "nats://": no host`},
		{"nats://:4222", nil, "no host"},
	} {
		got, err := natsjs.ParseURL(c.url)
		if c.err == "" {
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("ParseURL(%q) = %q, %v; want %q", c.url, got, err, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParseURL(%q) = %q, %v; want an error with %q", c.url, got, err, c.err)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("ParseURL(%q): error holds the password: %v", c.url, err)
		}
	}
}
