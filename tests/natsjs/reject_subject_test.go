package natsjs_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
)

// A message whose subject no stream captures is rejected with an error
// naming the subject, and the relay's log line of the rejection names the
// row's topic and message id besides its seq.
func TestRejectionNamesSubject(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t)
	prefix := testenv.Subject() // no stream captures it
	p, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := p.Publish(ctx, []txbox.Message{{ID: "lost-1", Topic: "orders.placed", Payload: []byte("x")}})
	if errs == nil || !txbox.IsRejected(errs[0]) || !strings.Contains(errs[0].Error(), `no JetStream stream captures subject "`+prefix+`orders.placed"`) {
		t.Fatalf("publish to an uncaptured subject: %v, want a rejection naming the subject %sorders.placed", errs, prefix)
	}

	drv := testenv.PgxDriver(t, 4)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{OutboxTable: "txbox_outbox"})
	testenv.Must(t, err, "migrate")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "outbox")
	tx, dtx, err := drv.BeginTx(ctx)
	testenv.Must(t, err, "begin")
	_, err = ob.Add(ctx, tx, txbox.Message{ID: "lost-2", Topic: "orders.shipped", Payload: []byte("x")})
	testenv.Must(t, err, "add")
	testenv.Must(t, dtx.Commit(ctx), "commit")

	var logs testenv.Buffer
	r, err := relay.New(drv, p, relay.Config{PollInterval: 20 * time.Millisecond, DisableNotify: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	testenv.Must(t, err, "relay")
	testenv.Must(t, r.Start(ctx), "start")
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	// The relay rejects the row at its first round; the go test timeout
	// bounds a relay that never does.
	for !strings.Contains(logs.String(), "broker rejected message") {
		time.Sleep(20 * time.Millisecond)
	}
	line := logs.String()[strings.Index(logs.String(), "broker rejected message"):]
	line = line[:strings.IndexByte(line, '\n')]
	for _, want := range []string{"topic=orders.shipped", "message_id=lost-2", prefix + "orders.shipped"} {
		if !strings.Contains(line, want) {
			t.Fatalf("the rejection's log line lacks %q:\n%s", want, line)
		}
	}
}
