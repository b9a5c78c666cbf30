package txboxrabbitmq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// ParseURL reads the URL as amqp091-go does and refuses what is wrong with
// errors that hold no password; NewConn refuses what ParseURL refuses.
func TestParseURL(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3tQZJ"
	for _, c := range []struct {
		url, host, vhost, pw string
		port                 int
		err                  string
	}{
		{url: "amqp://guest:guest@127.0.0.1:5672/", host: "127.0.0.1", port: 5672, vhost: "/", pw: "guest"},
		{url: "amqps://u:" + secret + "@rabbit.example/shop", host: "rabbit.example", port: 5671, vhost: "shop", pw: secret},
		{url: "amqp://u:" + secret + "@h:bad/", err: "malformed URL"},
		{url: "amqp://u:" + secret + "#x@h/", err: "must be percent-encoded"},
		{url: "redis://h:6379/0", err: "want amqp://"},
		{url: "h:5672", err: "want amqp://"},
	} {
		uri, err := txboxrabbitmq.ParseURL(c.url)
		if c.err == "" {
			if err != nil || uri.Host != c.host || uri.Port != c.port || uri.Vhost != c.vhost || uri.Password != c.pw {
				t.Errorf("ParseURL(%q) = %+v, %v", c.url, uri, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParseURL(%q) = %v; want an error with %q", c.url, err, c.err)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("ParseURL(%q): error holds the password: %v", c.url, err)
		}
		if _, err := txboxrabbitmq.NewConn(c.url, txboxrabbitmq.ConnConfig{}); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("NewConn(%q) = %v; want ErrInvalidConfig", c.url, err)
		}
	}
}
