package redisstream_test

import (
	"strings"
	"testing"

	"github.com/txbox/txbox/redisstream"
)

// ParseURL reads the URL as go-redis does, takes maxlen=N for the
// publisher, and refuses what is wrong with errors that hold no password.
func TestParseURL(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3tQZJ"
	for _, c := range []struct {
		url    string
		addr   string
		db     int
		pw     string
		maxLen int64
		tls    bool
		err    string
	}{
		{url: "redis://127.0.0.1:6379/0", addr: "127.0.0.1:6379"},
		{url: "redis://:" + secret + "@h:6380/2?maxlen=1000", addr: "h:6380", db: 2, pw: secret, maxLen: 1000},
		{url: "rediss://h/1?maxlen=5&dial_timeout=3s", addr: "h:6379", db: 1, maxLen: 5, tls: true},
		{url: "redis://h:6379/0?maxlen=-1", err: `maxlen="-1": want a non-negative integer`},
		{url: "redis://h:6379/0?maxlen=x", err: "want a non-negative integer"},
		{url: "redis://h:6379/0?bogus=1", err: "bogus"},
		{url: "redis://h:6379/x", err: "redisstream: "},
		{url: "redis://u:" + secret + "@h:bad/0", err: "malformed URL"},
		{url: "redis://u:" + secret + "%zz@h/0", err: "invalid %-escape in the user name or password"},
		{url: "amqp://h:6379/0", err: "want redis://host:6379/0"},
		{url: "h:6379", err: "want redis://host:6379/0"},
	} {
		opt, cfg, err := redisstream.ParseURL(c.url)
		if c.err == "" {
			if err != nil {
				t.Errorf("ParseURL(%q): %v", c.url, err)
				continue
			}
			if opt.Addr != c.addr || opt.DB != c.db || opt.Password != c.pw || cfg.MaxLen != c.maxLen || (opt.TLSConfig != nil) != c.tls {
				t.Errorf("ParseURL(%q) = addr %q db %d password %q maxlen %d tls %t; want %q %d %q %d %t",
					c.url, opt.Addr, opt.DB, opt.Password, cfg.MaxLen, opt.TLSConfig != nil, c.addr, c.db, c.pw, c.maxLen, c.tls)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParseURL(%q) = %v; want an error with %q", c.url, err, c.err)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("ParseURL(%q): error holds the password: %v", c.url, err)
		}
	}
}
