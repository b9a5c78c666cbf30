package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/internal/hostcheck"
	"github.com/txbox/txbox/txboxui"
)

// EnvUIToken is the token `txbox ui` (and `txbox relay --ui`) requires,
// when --token is not given.
const EnvUIToken = "TXBOX_UI_TOKEN"

// DefaultUIAddr is where `txbox ui` listens by default.
const DefaultUIAddr = "127.0.0.1:8080"

type uiFlags struct {
	tables      tableFlags
	http        string
	token       string
	allowed     []string
	readOnly    bool
	inboxTables []string
	dlq         dlqFlags
	dlqBindings []string
	relays      []string
	interval    time.Duration
	logLevel    string
	logJSON     bool

	// ready, when set (tests), receives the address listened on.
	ready func(addr string)
}

func newUICmd() *cobra.Command {
	f := &uiFlags{}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web dashboard: backlog, dead messages, inboxes, relays, consumer dead letters",
		Long: `Serve txbox's web dashboard (package txboxui) for one outbox table: the backlog
by state and the age of the oldest claimable row over time, the net backlog
change per second, the dead messages with redrive and discard buttons, the keys
they park, with --inbox-table the receipts of each inbox per source, with
--relay the state of relays running elsewhere (read from their /readyz), with
--dlq-binding the consumers' dead letters on the broker. Its
assets are embedded: it works offline.

It listens on loopback (` + DefaultUIAddr + `) unless --http names another
address, which needs a token (--token or ` + EnvUIToken + `): the browser asks for
it as the password of basic auth (any user name); off loopback the token must
be at least ` + strconv.Itoa(minUITokenLen) + ` bytes. Without a token, a request whose Host
header is not loopback (localhost, 127.0.0.1, [::1]) nor an --allowed-host is
refused, so that no web page can read or drive the dashboard through DNS
rebinding. Redrive and discard are POST forms with a CSRF token and a
cross-origin check.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUI(cmd, f) },
	}
	f.tables.register(cmd, false)
	fs := cmd.Flags()
	fs.StringVar(&f.http, "http", DefaultUIAddr, "address to listen on; one that is not loopback needs --token")
	fs.StringVar(&f.token, "token", "", "token every request must carry (basic-auth password or Authorization: Bearer); required off loopback, then at least 16 bytes (env "+EnvUIToken+", preferred: a flag shows in ps)")
	fs.StringSliceVar(&f.allowed, "allowed-host", nil, "host name (optionally :port) besides loopback that a request without a token may name in its Host header, e.g. the name a proxy forwards (repeat or comma-separate)")
	fs.BoolVar(&f.readOnly, "read-only", false, "hide and refuse redrive and discard")
	fs.StringSliceVar(&f.inboxTables, "inbox-table", nil, "inbox table to show receipts of, per source (repeat or comma-separate)")
	fs.StringVar(&f.dlq.broker, "broker", envOr(EnvBroker, ""), "with --dlq-binding: the consumers' broker, nats://…, amqp://…, redis://…, kafka://… (env "+EnvBroker+")")
	fs.StringSliceVar(&f.dlqBindings, "dlq-binding", nil, "consumer binding whose dead letters the panel at /dlq lists and redrives (repeat or comma-separate; see txbox dlq)")
	fs.StringVar(&f.dlq.prefix, "dead-letter-prefix", "", "JetStream: the subscriber's DeadLetterPrefix (default txbox.dlq.)")
	fs.StringVar(&f.dlq.suffix, "dead-letter-suffix", "", "Redis, Kafka: the subscriber's DeadLetterSuffix (default :dead on Redis, .dead on Kafka)")
	fs.StringSliceVar(&f.relays, "relay", nil, "the --http address of a txbox relay (http://127.0.0.1:9090) whose state the relay panel shows, read from its /readyz (repeat or comma-separate)")
	fs.DurationVar(&f.interval, "interval", txboxui.DefaultInterval, "how often the figures are read and sampled")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines instead of text")
	return cmd
}

// uiToken is --token, else TXBOX_UI_TOKEN.
func uiToken(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(EnvUIToken)
}

// minUITokenLen is the least length in bytes of a dashboard token off
// loopback.
const minUITokenLen = 16

// checkUIListen refuses an address that is not loopback without a token
// of at least minUITokenLen bytes, and a token of white space or with a
// control character anywhere. The token is never printed.
func checkUIListen(flag, addr, token string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%w: %s %q: %v", txbox.ErrInvalidConfig, flag, addr, err)
	}
	loopback := checkLoopback(addr, false) == nil
	from := "--token or --ui-token"
	if token != "" && token == os.Getenv(EnvUIToken) {
		from = EnvUIToken
	}
	switch {
	case token == "" && loopback:
		return nil
	case token == "":
		return fmt.Errorf("%w: %s %q is not a loopback address: the dashboard would be reachable from the network; set a token of at least %d bytes (--token or --ui-token, or %s)", txbox.ErrInvalidConfig, flag, addr, minUITokenLen, EnvUIToken)
	case strings.TrimSpace(token) == "":
		return fmt.Errorf("%w: the dashboard token (%s) is white space only", txbox.ErrInvalidConfig, from)
	case strings.ContainsFunc(token, unicode.IsControl):
		return fmt.Errorf("%w: the dashboard token (%s) holds a control character (a line end read from a file?)", txbox.ErrInvalidConfig, from)
	case !loopback && len(token) < minUITokenLen:
		return fmt.Errorf("%w: the dashboard token (%s) is %d bytes: with %s %q, not a loopback address, it must be at least %d bytes (e.g. openssl rand -hex 16)", txbox.ErrInvalidConfig, from, len(token), flag, addr, minUITokenLen)
	}
	return nil
}

func runUI(cmd *cobra.Command, f *uiFlags) error {
	ctx := cmd.Context()
	log, err := newLogger(cmd.ErrOrStderr(), f.logLevel, f.logJSON)
	if err != nil {
		return err
	}
	token := uiToken(f.token)
	if err := checkUIListen("--http", f.http, token); err != nil {
		return err
	}
	if err := hostcheck.Validate("--allowed-host", f.allowed); err != nil {
		return fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	if f.interval <= 0 {
		return fmt.Errorf("--interval %s: want a positive duration", f.interval)
	}
	db, err := f.tables.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	cfg, err := db.uiConfig(f.tables.schema, f.tables.table, f.inboxTables)
	if err != nil {
		return err
	}
	cfg.Token, cfg.AllowedHosts, cfg.ReadOnly, cfg.Interval, cfg.Logger = token, f.allowed, f.readOnly, f.interval, log
	for _, raw := range f.relays {
		ref, err := remoteRelay(raw)
		if err != nil {
			return err
		}
		cfg.Relays = append(cfg.Relays, ref)
	}
	if len(f.dlqBindings) > 0 {
		f.dlq.binding = f.dlqBindings[0]
		store, closeStore, err := f.dlq.open(ctx)
		if err != nil {
			return err
		}
		defer closeStore()
		kind, _, _ := strings.Cut(f.dlq.broker, "://")
		for _, b := range f.dlqBindings {
			cfg.DLQ = append(cfg.DLQ, txboxui.DLQRef{Name: kind, Binding: b, Store: store})
		}
	}
	h, err := txboxui.New(cfg)
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", f.http)
	if err != nil {
		return fmt.Errorf("--http %s: %w", f.http, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go h.Run(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	addr := ln.Addr().String()
	log.Info("serving the txbox dashboard", "url", "http://"+addr+"/", "db", db.target.String(), "table", cfg.Title, "auth", token != "")
	if f.ready != nil {
		f.ready(addr)
	}
	select {
	case err := <-done:
		return fmt.Errorf("--http %s: %w", f.http, err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// remoteRelay is the relay panel's entry for --relay URL: the relay's
// /readyz, named by its host and port.
func remoteRelay(raw string) (txboxui.RelayRef, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return txboxui.RelayRef{}, fmt.Errorf("--relay %q: want the relay's --http address, e.g. http://127.0.0.1:9090", redact(raw, raw))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/readyz"
	}
	return txboxui.RelayRef{Name: u.Host, Readyz: u.String()}, nil
}

// uiConfig builds the dashboard's sources for the outbox table and inbox
// tables named: its dead letters, its backlog and each inbox's Stats.
func (d *database) uiConfig(schema, table string, inboxTables []string) (txboxui.Config, error) {
	cfg := txboxui.Config{Title: table}
	if schema != "" {
		cfg.Title = schema + "." + table
	}
	ocfg := txbox.Config{Schema: schema, Table: table}
	var err error
	if cfg.Dead, err = onDriver(d, ocfg, dead.New[pgx.Tx], dead.New[*sql.Tx]); err != nil {
		return cfg, err
	}
	if cfg.Backlog, err = d.backlog(schema, table); err != nil {
		return cfg, err
	}
	for _, name := range inboxTables {
		icfg := inbox.Config{Schema: schema, Table: name, Logger: slog.New(slog.DiscardHandler)}
		var stats func(context.Context) ([]inbox.SourceStats, error)
		if d.pgx != nil {
			ib, err := inbox.New[pgx.Tx](d.pgx, icfg)
			if err != nil {
				return cfg, fmt.Errorf("--inbox-table %s: %w", name, err)
			}
			stats = ib.Stats
		} else {
			ib, err := inbox.New[*sql.Tx](d.sql, icfg)
			if err != nil {
				return cfg, fmt.Errorf("--inbox-table %s: %w", name, err)
			}
			stats = ib.Stats
		}
		cfg.Inboxes = append(cfg.Inboxes, txboxui.InboxRef{Name: name, Stats: stats})
	}
	return cfg, nil
}

// backlog reads the table's backlog through package inspect.
func (d *database) backlog(schema, table string) (txboxui.BacklogFunc, error) {
	cfg := txbox.Config{Schema: schema, Table: table}
	in, err := onDriver(d, cfg, inspect.New[pgx.Tx], inspect.New[*sql.Tx])
	if err != nil {
		return nil, err
	}
	return txboxui.InspectBacklog(in), nil
}
