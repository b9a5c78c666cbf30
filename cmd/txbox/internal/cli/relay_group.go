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
	"os/signal"
	"slices"
	"strings"
	"syscall"
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
	fs.StringVar(&f.storesFile, "stores", "", `JSON file listing the outbox tables to relay from this process: {"stores":[{"name":"acme","db":"postgres://…","schema":"acme","table":"txbox_outbox"}]}; --db values are added to them; SIGHUP reads it again (stores added, removed or changed join or leave without a restart)`)
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
	if f.storesFile != "" && !f.tables.fs.Changed("db") {
		for _, name := range []string{"schema", "table"} {
			if f.tables.fs.Changed(name) {
				return nil, fmt.Errorf("%w: --%s applies to the stores of --db, and none is given: give each store of --stores its %s in the file", txbox.ErrInvalidConfig, name, name)
			}
		}
	}
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
	if cmd.Flags().Changed("concurrency") {
		return fmt.Errorf("%w: --concurrency does not apply with several stores: a group runs one round of a store at a time (--db-budget bounds the rounds of one database at once)", txbox.ErrInvalidConfig)
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
	if f.served, err = serveRelayHTTP(ctx, log, f.http, f.httpPublic, f.ui, names); err != nil {
		return err
	}
	defer f.served.close()

	// One pool per distinct URL, shared by its stores (and their budget),
	// opened in the background: a store runs once its database is open.
	sctx, stop := context.WithCancel(ctx)
	starts := startStores(sctx, log, specs, f.migrate)
	defer func() {
		stop()
		starts.close()
	}()
	f.served.setStarts(starts)
	if f.ui {
		f.served.mountGroupUI(log, specs, starts, uiToken(f.uiToken))
	}
	// SIGHUP reads --stores again: stores added, removed or changed join
	// or leave the running group.
	var hup chan os.Signal
	if f.storesFile != "" {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	load := func() ([]storeSpec, error) {
		specs, err := groupStores(f)
		if err != nil {
			return nil, err
		}
		for _, s := range specs {
			if err := checkLanes(base, s.target.dialect, "store "+s.Name); err != nil {
				return nil, err
			}
		}
		return specs, nil
	}
	return reconnecting(ctx, log, out, f, func(br *broker) error {
		return groupWith(ctx, log, out, f, starts, br, base, budget, hup, load)
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

// groupWith runs the group of starts' stores on br until ctx ends (nil),
// the publisher closes for good (txbox.ErrPublisherClosed) or no store can
// run. Each store joins the group once starts has opened its database; on
// a signal from reload, load lists the stores again, and those removed or
// changed leave the group.
func groupWith(ctx context.Context, log *slog.Logger, out interface{ Write([]byte) (int, error) }, f *relayFlags,
	starts *storeStarts, br *broker, base relay.Config, budget int, reload <-chan os.Signal, load func() ([]storeSpec, error)) error {
	pub, err := br.publisher(f.broker.subjectPrefix)
	if err != nil {
		return err
	}
	g, err := relay.NewGroup(relay.GroupConfig{DatabaseBudget: budget, Logger: log})
	if err != nil {
		return err
	}
	relays := map[string]*relay.Relay{}
	var settingsLogged bool
	j := joiner{retryAt: map[string]time.Time{}, wait: map[string]time.Duration{}}
	// join adds each store whose database is open and which is not in the
	// group yet; one whose table is not migrated is left out, one whose
	// database failed again is tried again after a backoff. It returns
	// when the next try is due (zero: none).
	join := func() (time.Time, error) {
		var next time.Time
		for _, s := range starts.current() {
			if j.added(s.Name) || starts.isLeftOut(s.Name) {
				continue
			}
			db := starts.db(s)
			if db == nil {
				continue
			}
			if at := j.retryAt[s.Name]; time.Now().Before(at) {
				next = earliest(next, at)
				continue
			}
			cfg := base
			cfg.Schema, cfg.Table = s.Schema, s.Table
			cfg.Logger = log
			if f.served != nil {
				cfg.Observer = f.served.storeObserver(s.Name)
			}
			r, err := db.relay(pub, cfg)
			if err != nil {
				return next, fmt.Errorf("store %q: %w", s.Name, err)
			}
			err = g.Add(ctx, relay.Store{Name: s.Name, Database: s.target.String(), Relay: r})
			switch {
			case err == nil:
			case ctx.Err() != nil:
				return next, nil
			case transient(err):
				w := j.failed(s.Name)
				log.Warn("store not started; trying again", "store", s.Name, "retry_in", w, "err", err)
				starts.setWhy([]storeSpec{s}, fmt.Errorf("waiting for its database: %w", err))
				next = earliest(next, j.retryAt[s.Name])
				continue
			default:
				starts.leaveOut([]storeSpec{s}, err)
				continue
			}
			j.join(s.Name)
			relays[s.Name] = r
			starts.running(s.Name)
			f.served.setStore(s.Name, r)
			log.Info("store added", "store", s.Name, "db", s.target.String(), "schema", cmp.Or(s.Schema, "(the connection's default)"), "table", cmp.Or(s.Table, txbox.DefaultTable))
			if !settingsLogged {
				settingsLogged = true
				cfg := r.Config()
				log.Info("relay settings", "poll_interval", cfg.PollInterval, "batch_size", cfg.BatchSize,
					"retention", cfg.Retention, "max_attempts", cfg.MaxAttempts, "publish_timeout", cfg.PublishTimeout)
			}
		}
		return next, starts.allLeftOut()
	}
	log.Info("relay started", "stores", len(starts.current()), "broker", br.desc, "db_budget", budget)

	defer func() {
		for _, r := range relays {
			f.served.clearStore(r)
		}
	}()
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(gctx) }()
	var retry *time.Timer
	retryC := func() <-chan time.Time {
		if retry == nil {
			return nil
		}
		return retry.C
	}
	rejoin := func() error {
		next, err := join()
		if retry != nil {
			retry.Stop()
			retry = nil
		}
		if !next.IsZero() {
			retry = time.NewTimer(time.Until(next))
		}
		return err
	}
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
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
	// reloadStores reads the stores again: those removed, changed or left
	// out leave the group (each after its round in flight) and the set;
	// those added, changed or left out are opened and join. A list that
	// does not load leaves the stores as they were.
	reloadStores := func() {
		specs, err := load()
		if err != nil {
			log.Error("reload of --stores refused; the stores run as they were", "err", err)
			return
		}
		drop, add := starts.diff(specs)
		for _, name := range drop {
			if r, ok := relays[name]; ok {
				rctx, cancel := context.WithTimeout(ctx, cmp.Or(base.PublishTimeout, relay.DefaultPublishTimeout)+10*time.Second)
				if err := g.Remove(rctx, name); err != nil {
					log.Warn("store removed before its round ended", "store", name, "err", err)
				}
				cancel()
				f.served.clearStore(r)
				delete(relays, name)
			}
			j.forget(name)
		}
		starts.drop(drop)
		starts.add(add)
		starts.order(specs)
		f.served.reloaded(specs)
		var added, removed []string
		for _, sp := range add {
			added = append(added, sp.Name)
		}
		for _, name := range drop {
			if !slices.Contains(added, name) {
				removed = append(removed, name)
			}
		}
		log.Info("reloaded --stores", "stores", len(specs), "added_or_changed", strings.Join(added, ","), "removed", strings.Join(removed, ","))
	}
	var closed error
	closed = rejoin()
loop:
	for closed == nil {
		select {
		case <-ctx.Done():
			log.Info("stopping relay", "cause", context.Cause(ctx))
			break loop
		case <-starts.changed:
			closed = rejoin()
		case <-retryC():
			retry = nil
			closed = rejoin()
		case <-reload:
			reloadStores()
			closed = rejoin()
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
	case <-time.After(cmp.Or(base.PublishTimeout, relay.DefaultPublishTimeout) + 10*time.Second):
		return errors.New("relay did not stop in time")
	}
	if f.statsInterval > 0 {
		printStats()
	}
	if closed != nil {
		return closed
	}
	log.Info("relay stopped")
	return nil
}
