package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
)

func noopTx(context.Context, pgx.Tx, consumer.Message) error { return nil }
func noop(context.Context, consumer.Message) error           { return nil }

// startupProblems starts c and returns the problems it reports.
func startupProblems(t *testing.T, c *consumer.Consumer[pgx.Tx]) []string {
	t.Helper()
	err := c.Start(context.Background())
	if err == nil {
		_ = c.Stop(context.Background())
		t.Fatal("Start succeeded; want a startup error")
	}
	var se *consumer.StartupError
	if !errors.As(err, &se) || !errors.Is(err, consumer.ErrStartup) {
		t.Fatalf("Start: %v; want a *StartupError", err)
	}
	return se.Problems
}

// expect checks that each want appears in exactly one problem, and that
// there are no other problems.
func expect(t *testing.T, problems []string, want ...string) {
	t.Helper()
	for _, w := range want {
		n := 0
		for _, p := range problems {
			if strings.Contains(p, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d problems mention %q, want 1; problems:\n%s", n, w, strings.Join(problems, "\n"))
		}
	}
	if len(problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(problems), len(want), strings.Join(problems, "\n"))
	}
}

// Every problem is listed in one error: an unmigrated inbox table, a
// binding missing on the broker, two handlers with one name, two handlers
// on one binding; and a consumer with no database refuses an inbox handler
// instead of falling back to at-least-once.
func TestStartupValidation(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"nats", "rabbitmq"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := newBroker(t, kind)
			d := pgxDB(t, 4)
			missing := b.binding("orders") + "_missing"
			if kind == "nats" {
				missing = "NO_SUCH_STREAM_" + strconvName(testenv.Name("x")) + "/orders"
			}

			c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet})
			testenv.Must(t, err, "New")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: b.binding("orders")}, noopTx), "register")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: b.binding("shipments")}, noopTx), "register")
			testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "audit", Binding: missing}, noop), "register")
			testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "audit2", Binding: b.binding("shipments")}, noop), "register")
			expect(t, startupProblems(t, c),
				`handler name "billing" is registered more than once`,
				`binding "`+missing+`"`,
				`binding "`+b.binding("shipments")+`": handlers "billing" and "audit2" all claim route {any}`,
				`inbox table "txbox_inbox" is not migrated: pending migration(s) 1 (create_inbox)`,
			)

			// Migrated, then the table dropped behind migrate's back.
			d.migrateAll(t)
			d.exec(t, "DROP TABLE txbox_inbox")
			c, err = consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet})
			testenv.Must(t, err, "New")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: b.binding("orders")}, noopTx), "register")
			expect(t, startupProblems(t, c), `inbox table "txbox_inbox" is missing`)

			// No database at all.
			c, err = consumer.New[pgx.Tx](nil, consumer.Config{Broker: b.sub, Logger: quiet})
			testenv.Must(t, err, "New")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: b.binding("orders")}, noopTx), "register")
			testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Binding: b.binding("events")}, noop), "register")
			expect(t, startupProblems(t, c),
				`handler "billing" has the inbox guarantee but the consumer has no database`,
				`handler #2 has no Name`)

			// Sound configuration: starts.
			d.exec(t, "DELETE FROM txbox_migrations WHERE target = 'inbox:txbox_inbox'")
			d.migrateAll(t)
			c, err = consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet})
			testenv.Must(t, err, "New")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: b.binding("orders")}, noopTx), "register")
			testenv.Must(t, c.Start(context.Background()), "start a sound consumer")
			testenv.Must(t, c.Stop(context.Background()), "stop")
		})
	}
}

// Names a message could never carry are refused at start, not found out by
// dead-lettering every message: a handler name (the inbox's source) or a
// binding that is not valid UTF-8 or holds a control character, and a
// route field that could never match.
func TestStartupValidationNames(t *testing.T) {
	t.Parallel()
	b := newBroker(t, "nats")
	c, err := consumer.New[pgx.Tx](nil, consumer.Config{Broker: b.sub, Logger: quiet})
	testenv.Must(t, err, "New")
	orders := b.binding("orders")
	for _, h := range []consumer.HandlerConfig{
		{Name: "bill\xffing", Binding: orders},
		{Name: "audit\x1b", Binding: orders, Route: consumer.Route{Topic: "a"}},
		{Name: "ship", Binding: orders + "\xfe"},
		{Name: "mail", Binding: orders, Route: consumer.Route{Topic: "order.\xc3"}},
	} {
		testenv.Must(t, c.HandleAtLeastOnce(h, noop), "register %q", h.Name)
	}
	expect(t, startupProblems(t, c),
		`handler "bill\xffing": name is not valid UTF-8`,
		`handler "audit\x1b": name contains control character 0x1b`,
		`handler "ship": binding "`+orders+`\xfe" is not valid UTF-8`,
		`Topic is not valid UTF-8: it would never match`,
	)
}
