package txboxasynq_test

import (
	"strings"
	"testing"

	"github.com/txbox/txbox/txboxasynq"
)

// ParseURL reads asynq+redis:// as go-redis reads redis://, takes
// queue=NAME for the publisher, and refuses what is wrong with errors that
// hold no password.
func TestParseURL(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3tQZJ"
	for _, c := range []struct {
		url, addr string
		db        int
		queue     string
		tls       bool
		err       string
	}{
		{url: "asynq+redis://127.0.0.1:6379/0", addr: "127.0.0.1:6379", queue: txboxasynq.DefaultQueue},
		{url: "asynq+rediss://:" + secret + "@h/3?queue=orders", addr: "h:6379", db: 3, queue: "orders", tls: true},
		{url: "redis://h:6380/0?queue=q", addr: "h:6380", queue: "q"},
		{url: "asynq+redis://h/0?queue=%20q", err: "surrounding spaces"},
		{url: "asynq+redis://h/0?bogus=1", err: "bogus"},
		{url: "asynq+redis://u:" + secret + "@h:bad/0", err: "malformed URL"},
		{url: "asynq+amqp://h/", err: "want asynq+redis://"},
		{url: "kafka://h:9092", err: "want asynq+redis://"},
	} {
		opt, cfg, err := txboxasynq.ParseURL(c.url)
		if c.err == "" {
			if err != nil {
				t.Errorf("ParseURL(%q): %v", c.url, err)
				continue
			}
			if opt.Addr != c.addr || opt.DB != c.db || cfg.Queue != c.queue || (opt.TLSConfig != nil) != c.tls {
				t.Errorf("ParseURL(%q) = addr %q db %d queue %q tls %t; want %q %d %q %t",
					c.url, opt.Addr, opt.DB, cfg.Queue, opt.TLSConfig != nil, c.addr, c.db, c.queue, c.tls)
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
