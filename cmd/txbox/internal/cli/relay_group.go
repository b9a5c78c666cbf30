package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
)

// repeatedDB is relay's --db: the first value replaces the default, later
// ones are more stores (tableFlags.moreDBs).
type repeatedDB struct {
	f   *tableFlags
	set bool
}

func (r *repeatedDB) String() string {
	if r == nil || r.f == nil {
		return ""
	}
	return r.f.db
}

func (r *repeatedDB) Set(v string) error {
	if !r.set {
		r.f.db, r.set = v, true
		return nil
	}
	r.f.moreDBs = append(r.f.moreDBs, v)
	return nil
}

func (r *repeatedDB) Type() string { return "string" }

var dbBudgetSetting = setting[int]{flag: "db-budget", min: 1, max: 64}

func registerGroupFlags(fs *pflag.FlagSet, f *relayFlags) {
	fs.StringVar(&f.storesFile, "stores", "", `JSON file listing the outbox tables to relay from this process: {"stores":[{"name":"acme","db":"postgres://…","schema":"acme","table":"txbox_outbox"}]}; --db values are added to them`)
	fs.IntVar(&f.dbBudget, "db-budget", relay.DefaultDatabaseBudget, "with several stores (--db repeated or --stores): rounds that may hold a connection of one database at once, 1 to 64")
}

// storeSpec is one store of `txbox relay --stores FILE`, or one --db.
type storeSpec struct {
	Name   string `json:"name"`   // default: host/database[.schema][.table], or the SQLite path
	DB     string `json:"db"`     // database URL, as --db
	Schema string `json:"schema"` // PostgreSQL schema; default: the connection's search_path
	Table  string `json:"table"`  // default: txbox_outbox

	target dbTarget
}

// maxStoreName bounds a store's name (a log attribute and a metrics label).
const maxStoreName = 200

// groupStores lists the stores of a relay with several: the --stores file's,
// then each --db (with --schema and --table) when --db was set or --stores
// was not given.
func groupStores(f *relayFlags) ([]storeSpec, error) {
	var specs []storeSpec
	if f.storesFile != "" {
		raw, err := os.ReadFile(f.storesFile)
		if err != nil {
			return nil, fmt.Errorf("--stores: %w", err)
		}
		var file struct {
			Stores []storeSpec `json:"stores"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&file); err != nil {
			return nil, fmt.Errorf("%w: --stores %s: %v", txbox.ErrInvalidConfig, f.storesFile, redactErr(err, string(raw)))
		}
		if len(file.Stores) == 0 {
			return nil, fmt.Errorf("%w: --stores %s lists no stores", txbox.ErrInvalidConfig, f.storesFile)
		}
		specs = file.Stores
	}
	if f.storesFile == "" || f.tables.fs.Changed("db") {
		for _, db := range append([]string{f.tables.db}, f.tables.moreDBs...) {
			specs = append(specs, storeSpec{DB: db, Schema: f.tables.schema, Table: f.tables.table})
		}
	}
	seen := map[string]bool{}
	for i := range specs {
		s := &specs[i]
		where := fmt.Sprintf("store %d", i+1)
		if s.Name != "" {
			where = fmt.Sprintf("store %q", s.Name)
		}
		t, err := parseDBFrom(where+": db", s.DB)
		if err != nil {
			return nil, err
		}
		s.target = t
		if _, err := (txbox.Config{Schema: s.Schema, Table: s.Table}).TableName(t.dialect); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if s.Name == "" {
			s.Name = defaultStoreName(t, s.Schema, s.Table)
		}
		if len(s.Name) > maxStoreName || strings.ContainsFunc(s.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("%w: %s: a name is at most %d bytes, without control characters", txbox.ErrInvalidConfig, where, maxStoreName)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%w: two stores are named %q (give each a distinct name)", txbox.ErrInvalidConfig, s.Name)
		}
		seen[s.Name] = true
	}
	return specs, nil
}

// defaultStoreName names a store by where its table is, without user or
// password: host/database, the schema and the table when not the default.
func defaultStoreName(t dbTarget, schema, table string) string {
	name := t.path
	if t.path == "" {
		if u, err := url.Parse(t.url); err == nil {
			name = u.Host + u.Path
		}
	}
	if schema != "" {
		name += "." + schema
	}
	if table != "" && table != txbox.DefaultTable {
		name += "." + table
	}
	return name
}

// runRelayGroup is `txbox relay` with several stores: one relay.Group over
// every store, one broker publisher for them all.
func runRelayGroup(cmd *cobra.Command, f *relayFlags, log *slog.Logger, base relay.Config) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	if f.ui {
		if f.http == "" {
			return fmt.Errorf("%w: --ui needs --http", txbox.ErrInvalidConfig)
		}
		if err := checkUIListen("--http", f.http, uiToken(f.uiToken)); err != nil {
			return err
		}
	}
	budget := relay.DefaultDatabaseBudget
	if err := dbBudgetSetting.resolve(cmd.Flags(), f.dbBudget, &budget); err != nil {
		return err
	}
	specs, err := groupStores(f)
	if err != nil {
		return err
	}
	for _, s := range specs {
		if err := checkLanes(base, s.target.dialect, "store "+s.Name); err != nil {
			return err
		}
	}
	if err := f.broker.check(); err != nil {
		return err
	}
	f.broker.events = log
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	if f.served, err = serveRelayHTTP(ctx, log, f.http, f.httpPublic, names); err != nil {
		return err
	}
	defer f.served.close()

	// One pool per distinct URL, shared by its stores (and their budget).
	dbs := map[string]*database{}
	defer func() {
		for _, db := range dbs {
			db.Close()
		}
	}()
	for _, s := range specs {
		key := dbKey(s.target)
		if _, ok := dbs[key]; ok {
			continue
		}
		db, err := untilReachable(ctx, log, "database "+s.target.String(), dbRetryable,
			func(ctx context.Context) (*database, error) { return openTarget(ctx, s.target, createFile) })
		if err != nil || db == nil {
			return err
		}
		dbs[key] = db
		if f.migrate {
			for _, o := range specs {
				if o.target == s.target {
					if err := migrateStore(ctx, log, db, o); err != nil {
						return err
					}
				}
			}
		}
	}

	if f.ui {
		if err := f.served.mountGroupUI(log, specs, dbs, uiToken(f.uiToken)); err != nil {
			return err
		}
	}
	return reconnecting(ctx, log, out, f, func(br *broker) error {
		return groupWith(ctx, log, out, f, specs, dbs, br, base, budget)
	})
}

// dbKey tells the databases of stores apart: one pool each.
func dbKey(t dbTarget) string { return t.String() + "|" + t.url + t.path }

func migrateStore(ctx context.Context, log *slog.Logger, db *database, s storeSpec) error {
	tf := tableFlags{schema: s.Schema, table: cmp.Or(s.Table, txbox.DefaultTable)}
	m, err := db.migrator(tf.migrateConfig())
	if err != nil {
		return err
	}
	applied, err := m.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate up of store %q on %s: %w", s.Name, db.target, err)
	}
	for _, mg := range applied {
		log.Info("applied migration", "store", s.Name, "target", mg.Target, "version", mg.Version, "name", mg.Name)
	}
	return nil
}

// groupWith runs the group of specs on br until ctx ends (nil) or the
// publisher closes for good (txbox.ErrPublisherClosed).
func groupWith(ctx context.Context, log *slog.Logger, out interface{ Write([]byte) (int, error) }, f *relayFlags,
	specs []storeSpec, dbs map[string]*database, br *broker, base relay.Config, budget int) error {
	pub, err := br.publisher(f.broker.subjectPrefix)
	if err != nil {
		return err
	}
	g, err := relay.NewGroup(relay.GroupConfig{DatabaseBudget: budget, Logger: log})
	if err != nil {
		return err
	}
	relays := make([]*relay.Relay, 0, len(specs))
	for _, s := range specs {
		db := dbs[dbKey(s.target)]
		cfg := base
		cfg.Schema, cfg.Table = s.Schema, s.Table
		cfg.Logger = log
		if f.served != nil {
			cfg.Observer = f.served.storeObserver(s.Name)
		}
		r, err := db.relay(pub, cfg)
		if err != nil {
			return fmt.Errorf("store %q: %w", s.Name, err)
		}
		if err := g.Add(ctx, relay.Store{Name: s.Name, Database: s.target.String(), Relay: r}); err != nil {
			return err
		}
		relays = append(relays, r)
		f.served.setStore(s.Name, r)
		defer f.served.setStore(s.Name, nil)
		log.Info("store added", "store", s.Name, "db", s.target.String(), "schema", cmp.Or(s.Schema, "(the connection's default)"), "table", cmp.Or(s.Table, txbox.DefaultTable))
	}
	cfg := relays[0].Config()
	log.Info("relay started", "stores", len(specs), "databases", len(dbs), "db_budget", budget, "broker", br.desc,
		"poll_interval", cfg.PollInterval, "batch_size", cfg.BatchSize, "retention", cfg.Retention, "max_attempts", cfg.MaxAttempts, "publish_timeout", cfg.PublishTimeout)

	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(gctx) }()
	var tick <-chan time.Time
	if f.statsInterval > 0 {
		t := time.NewTicker(f.statsInterval)
		defer t.Stop()
		tick = t.C
	}
	var last int64
	printStats := func() {
		var st relay.Stats
		for _, r := range relays {
			c := r.Counters()
			st.Published += c.Published
			st.Rejected += c.Rejected
			st.Dead += c.Dead
			st.Rounds += c.Rounds
			st.FailedRounds += c.FailedRounds
		}
		fmt.Fprintf(out, "relay: %d stores: published %d (+%d), rejected %d, dead %d, rounds %d (failed %d)\n",
			len(relays), st.Published, st.Published-last, st.Rejected, st.Dead, st.Rounds, st.FailedRounds)
		last = st.Published
	}
	var closed error
loop:
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping relay", "cause", context.Cause(ctx))
			break loop
		case err := <-done:
			printStats()
			return err
		case <-br.closed:
			closed = fmt.Errorf("%w: the NATS connection is closed: %v", txbox.ErrPublisherClosed, br.nc.LastError())
			break loop
		case <-tick:
			printStats()
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-time.After(cfg.PublishTimeout + 10*time.Second):
		return errors.New("relay did not stop in time")
	}
	printStats()
	if closed != nil {
		return closed
	}
	log.Info("relay stopped")
	return nil
}
