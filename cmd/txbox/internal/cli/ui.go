package cli

import (
	"cmp"
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
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/internal/hostcheck"
	"github.com/txbox/txbox/txboxdriver"
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
	claimTables []string      // --claim-check-table
	claimRet    time.Duration // --claim-check-retention
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

With --db repeated, it serves several stores (txboxui.NewStores, as txbox
relay --ui does): at / the list of the stores with their backlogs, at
/store/N/ the dashboard of the N-th (from 0), /?store=NAME redirects there.
--schema, --table and --inbox-table apply to every --db; the --relay and
--dlq-binding panels are on every store's dashboard. A store is named by
its host, database, schema and table; a store whose database does not
open at start is listed with its error and tried again when asked for.

It listens on loopback (` + DefaultUIAddr + `) unless --http names another
address, which needs a token (--token or ` + EnvUIToken + `): the browser asks for
it as the password of basic auth (any user name); off loopback the token must
be at least ` + strconv.Itoa(txboxui.MinTokenLen) + ` bytes. Without a token, a request whose Host
header is not loopback (localhost, 127.0.0.1, [::1]) nor an --allowed-host is
refused, so that no web page can read or drive the dashboard through DNS
rebinding. Redrive and discard are POST forms with a CSRF token and a
cross-origin check.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUI(cmd, f) },
	}
	f.tables.multiDB = "repeat it to serve several databases: the list of the stores at /, each store's dashboard at /store/N/"
	f.tables.register(cmd, false)
	fs := cmd.Flags()
	fs.StringVar(&f.http, "http", DefaultUIAddr, "address to listen on; one that is not loopback needs --token")
	fs.StringVar(&f.token, "token", "", "token every request must carry (basic-auth password or Authorization: Bearer); required off loopback, then at least 16 bytes (env "+EnvUIToken+", preferred: a flag shows in ps)")
	fs.StringSliceVar(&f.allowed, "allowed-host", nil, "host name (optionally :port) besides loopback that a request without a token may name in its Host header, e.g. the name a proxy forwards (repeat or comma-separate)")
	fs.BoolVar(&f.readOnly, "read-only", false, "hide and refuse redrive and discard")
	fs.StringSliceVar(&f.inboxTables, "inbox-table", nil, "inbox table to show receipts of, per source (repeat or comma-separate)")
	fs.StringSliceVar(&f.claimTables, "claim-check-table", nil, "claim check table (in --schema) to show the stored payloads of: count, bytes, oldest, what the next sweep deletes (repeat or comma-separate)")
	fs.DurationVar(&f.claimRet, "claim-check-retention", claimcheck.DefaultRetention, "with --claim-check-table: the sweeps' retention (as txbox relay --claim-check-retention), for what the next sweep deletes")
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

// checkUIListen refuses, with txboxui.CheckToken, a dashboard token that
// may not guard addr (white space, a control character; off loopback,
// none or fewer than txboxui.MinTokenLen bytes), saying which flag or
// variable gave it. The token is never printed.
func checkUIListen(flag, addr, token string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%w: %s %q: %v", txbox.ErrInvalidConfig, flag, addr, err)
	}
	if err := txboxui.CheckToken(addr, token); err != nil {
		from := "--token or --ui-token, or " + EnvUIToken
		if token != "" && token == os.Getenv(EnvUIToken) {
			from = EnvUIToken
		}
		return fmt.Errorf("%s %s, dashboard token from %s: %w", flag, addr, from, err)
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
	var specs []storeSpec
	if len(f.tables.moreDBs) > 0 {
		if specs, err = checkStores(f.tables.dbStores(), "one dashboard is enough"); err != nil {
			return err
		}
	}
	var panels txboxui.Config // the relay and dead-letter panels, on every store's dashboard
	for _, raw := range f.relays {
		ref, err := remoteRelay(raw)
		if err != nil {
			return err
		}
		panels.Relays = append(panels.Relays, ref)
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
			panels.DLQ = append(panels.DLQ, txboxui.DLQRef{Name: kind, Binding: b, Store: store})
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	setup := func(cfg *txboxui.Config) {
		cfg.Relays, cfg.DLQ = panels.Relays, panels.DLQ
		cfg.Token, cfg.AllowedHosts, cfg.ReadOnly, cfg.Interval, cfg.Logger = token, f.allowed, f.readOnly, f.interval, log
	}
	var h http.Handler
	var served []any // what the log line names
	if specs == nil {
		db, err := f.tables.open(ctx)
		if err != nil {
			return err
		}
		defer func() { cancel(); db.Close() }() // the sampling ends first
		cfg, err := db.uiConfig(f.tables.schema, f.tables.table, f.uiTables())
		if err != nil {
			return err
		}
		setup(&cfg)
		one, err := txboxui.New(cfg)
		if err != nil {
			return err
		}
		go one.Run(ctx)
		h, served = one, []any{"db", db.target.String(), "table", cfg.Title}
	} else {
		s := &uiStores{ctx: ctx, tables: f.uiTables(), setup: setup}
		for _, sp := range specs {
			s.stores = append(s.stores, &uiStore{spec: sp})
		}
		defer func() { cancel(); s.close() }() // the sampling ends first
		if s.ui, err = txboxui.NewStores(txboxui.StoresConfig{Title: "txbox", Stores: s.refs, Token: token, AllowedHosts: f.allowed, Logger: log}); err != nil {
			return err
		}
		for _, st := range s.stores {
			if _, err := s.open(st); err != nil {
				log.Warn("a store's database did not open; its page tries again when asked for", "store", st.spec.Name, "err", err)
			}
		}
		h, served = s.ui, []any{"stores", len(specs)}
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", f.http)
	if err != nil {
		return fmt.Errorf("--http %s: %w", f.http, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	addr := ln.Addr().String()
	log.Info("serving the txbox dashboard", append(append([]any{"url", "http://" + addr + "/"}, served...), "auth", token != "")...)
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

// uiStores is the dashboard of `txbox ui` with several --db: a
// txboxui.Stores (the list at /, each store's dashboard at /store/N/),
// each store's database opened at start, or, if it did not open then, when
// its page or the list is asked for.
type uiStores struct {
	ctx    context.Context // ends the stores' sampling
	tables uiTables
	setup  func(*txboxui.Config) // sets the panels, token and options common to every store
	ui     *txboxui.Stores
	stores []*uiStore
}

type uiStore struct {
	spec storeSpec
	mu   sync.Mutex
	db   *database        // nil until open
	ui   *txboxui.Handler // nil until open
}

// refs lists the stores for txboxui.Stores.
func (s *uiStores) refs() []txboxui.StoreRef {
	out := make([]txboxui.StoreRef, len(s.stores))
	for i, st := range s.stores {
		out[i] = txboxui.StoreRef{Name: st.spec.Name, Open: func() (*txboxui.Handler, error) { return s.open(st) }}
	}
	return out
}

// open returns st's dashboard, opening its database and sampling its
// figures every --interval if that is not done yet.
func (s *uiStores) open(st *uiStore) (*txboxui.Handler, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ui != nil {
		return st.ui, nil
	}
	db, err := openTarget(s.ctx, st.spec.target, mustExist)
	if err != nil {
		return nil, redactErr(err, st.spec.target.url, st.spec.target.dsn)
	}
	cfg, err := db.uiConfig(st.spec.Schema, cmp.Or(st.spec.Table, txbox.DefaultTable), s.tables)
	if err == nil {
		s.setup(&cfg)
		cfg.Title, cfg.Logger = st.spec.Name, cfg.Logger.With("store", st.spec.Name)
		st.ui, err = s.ui.New(cfg)
	}
	if err != nil {
		db.Close()
		return nil, redactErr(err, st.spec.target.url, st.spec.target.dsn)
	}
	st.db = db
	go st.ui.Run(s.ctx)
	return st.ui, nil
}

// close closes the stores' databases.
func (s *uiStores) close() {
	for _, st := range s.stores {
		st.mu.Lock()
		if st.db != nil {
			st.db.Close()
		}
		st.mu.Unlock()
	}
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

// uiTables are the tables beside the outbox table that a dashboard shows.
type uiTables struct {
	inbox          []string
	claims         []string
	claimRetention time.Duration
}

func (f *uiFlags) uiTables() uiTables {
	return uiTables{inbox: f.inboxTables, claims: f.claimTables, claimRetention: f.claimRet}
}

// uiConfig builds the dashboard's sources for the outbox table and the
// tables named: its dead letters, its backlog, its scheduled messages and
// their cancel, each inbox's Stats and each claim check table's.
func (d *database) uiConfig(schema, table string, tables uiTables) (txboxui.Config, error) {
	cfg := txboxui.Config{Title: table}
	if schema != "" {
		cfg.Title = schema + "." + table
	}
	ocfg := txbox.Config{Schema: schema, Table: table}
	var err error
	if cfg.Dead, err = onDriver(d, ocfg, dead.New[pgx.Tx], dead.New[*sql.Tx]); err != nil {
		return cfg, err
	}
	in, err := onDriver(d, ocfg, inspect.New[pgx.Tx], inspect.New[*sql.Tx])
	if err != nil {
		return cfg, err
	}
	cfg.Backlog, cfg.Scheduled = txboxui.InspectBacklog(in), txboxui.InspectScheduled(in)
	ob, err := onDriver(d, ocfg,
		func(d txboxdriver.Driver[pgx.Tx], c txbox.Config) (canceller, error) { return txbox.New(d, c) },
		func(d txboxdriver.Driver[*sql.Tx], c txbox.Config) (canceller, error) { return txbox.New(d, c) })
	if err != nil {
		return cfg, err
	}
	cfg.Cancel = ob.CancelNoTx
	for _, name := range tables.claims {
		ccfg := claimcheck.Config{Schema: schema, Table: name, OutboxTables: []string{table}}
		var st *claimcheck.Store
		if d.pgx != nil {
			st, err = claimcheck.New[pgx.Tx](d.pgx, ccfg)
		} else {
			st, err = claimcheck.New[*sql.Tx](d.sql, ccfg)
		}
		if err != nil {
			return cfg, fmt.Errorf("--claim-check-table %s: %w", name, err)
		}
		cfg.ClaimChecks = append(cfg.ClaimChecks, txboxui.StoreClaimCheck(name, st, cmp.Or(tables.claimRetention, claimcheck.DefaultRetention)))
	}
	for _, name := range tables.inbox {
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
