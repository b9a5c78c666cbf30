package txboxkafka_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/txbox/txbox/txboxkafka"
)

// ParseURL returns the seed brokers and refuses credentials and seeds
// without a port, with errors that hold no password.
func TestParseURL(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3tQZJ"
	for _, c := range []struct {
		url  string
		want []string
		err  string
	}{
		{"kafka://127.0.0.1:9092", []string{"127.0.0.1:9092"}, ""},
		{"kafka://a:9092, b:9093/ignored?x=1", []string{"a:9092", "b:9093"}, ""},
		{"kafka://[::1]:9092", []string{"[::1]:9092"}, ""},
		{"kafka://u:" + secret + "@h:9092", nil, "takes no user name or password"},
		{"kafka://h:9092,u:" + secret + "/x@h2:bad", nil, "takes no user name or password"},
		{"kafka://h", nil, `seed "h": want host:port`},
		{"kafka://:9092", nil, "want host:port"},
		{"kafka://", nil, "want kafka://host:9092"},
		{"nats://h:9092", nil, "want kafka://host:9092"},
		{"h:9092", nil, "want kafka://host:9092"},
	} {
		got, err := txboxkafka.ParseURL(c.url)
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
