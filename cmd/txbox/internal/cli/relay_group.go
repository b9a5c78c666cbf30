package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/supervise"
	"github.com/txbox/txbox/txboxdriver"
)

// repeatedDB is the --db of relay and ui: the first value replaces the
// default, later ones are more stores (tableFlags.moreDBs).
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
	line   int // in the --stores file; 0 for a --db
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
		file, err := parseStoresFile(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: --stores %s: %v", txbox.ErrInvalidConfig, f.storesFile, redactErr(err, string(raw)))
		}
		if len(file) == 0 {
			return nil, fmt.Errorf("%w: --stores %s lists no stores", txbox.ErrInvalidConfig, f.storesFile)
		}
		specs = file
	}
	if f.storesFile == "" || f.tables.fs.Changed("db") {
		specs = append(specs, f.tables.dbStores()...)
	}
	return checkStores(specs, "two relays of one table in one process would only race")
}

// dbStores is a store for each --db, with --schema and --table.
func (f *tableFlags) dbStores() []storeSpec {
	var specs []storeSpec
	for _, db := range append([]string{f.db}, f.moreDBs...) {
		specs = append(specs, storeSpec{DB: db, Schema: f.schema, Table: f.table})
	}
	return specs
}

// checkStores parses each store's database URL and checks its table name,
// names the stores without a name (defaultStoreName), and refuses two
// stores of one name or of one table (why says what two stores of one
// table would do).
func checkStores(specs []storeSpec, why string) ([]storeSpec, error) {
	seen := map[string]bool{}
	tables := map[string]*storeSpec{}
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
		k := tableKey(t, s.Schema, s.Table)
		if o := tables[k]; o != nil {
			return nil, fmt.Errorf("%w: stores %s and %s are the same table (%s): give each table one store (%s)",
				txbox.ErrInvalidConfig, o.where(), s.where(), k, why)
		}
		tables[k] = s
	}
	return specs, nil
}

// same reports whether s and o are one store: same name, database and
// table.
func (s storeSpec) same(o storeSpec) bool {
	return s.Name == o.Name && s.DB == o.DB && s.Schema == o.Schema && s.Table == o.Table
}

// where names a store in an error: its name, and its line in the --stores
// file.
func (s *storeSpec) where() string {
	if s.line > 0 {
		return fmt.Sprintf("%q (line %d)", s.Name, s.line)
	}
	return fmt.Sprintf("%q", s.Name)
}

// tableKey names the table a store relays from, for telling two stores of
// one table apart: the database (host, port and database name, without user
// or password; the SQLite file's absolute path), the schema (PostgreSQL's
// "" counted as public: two stores that differ only there are refused
// too), and the table.
func tableKey(t dbTarget, schema, table string) string {
	table = cmp.Or(table, txbox.DefaultTable)
	db := t.path
	switch t.dialect {
	case txboxdriver.SQLite:
		if abs, err := filepath.Abs(t.path); err == nil {
			db = abs
		}
	case txboxdriver.Postgres:
		schema = cmp.Or(schema, "public")
		fallthrough
	default:
		if u, err := url.Parse(t.url); err == nil {
			port := u.Port()
			if port == "" {
				port = map[txboxdriver.Dialect]string{txboxdriver.Postgres: "5432", txboxdriver.MySQL: "3306"}[t.dialect]
			}
			db = net.JoinHostPort(strings.ToLower(u.Hostname()), port) + u.Path
		}
	}
	key := string(t.dialect) + " " + db
	if schema != "" {
		key += " schema " + schema
	}
	return key + " table " + table
}

// parseStoresFile reads a --stores file: one JSON object {"stores": [...]}
// and nothing after it, each store with only the fields of storeSpec. It
// records each store's line.
func parseStoresFile(raw []byte) ([]storeSpec, error) {
	lineAt := func(off int64) int { return 1 + bytes.Count(raw[:min(int(off), len(raw))], []byte("\n")) }
	// next returns the offset of the next token after off (past white space
	// and a comma).
	next := func(off int64) int64 {
		for off < int64(len(raw)) && strings.IndexByte(" \t\r\n,", raw[off]) >= 0 {
			off++
		}
		return off
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	delim := func(want json.Delim) error {
		off := next(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("line %d: %w", lineAt(off), err)
		}
		if d, ok := tok.(json.Delim); !ok || d != want {
			return fmt.Errorf("line %d: want %q, found %v", lineAt(off), want, tok)
		}
		return nil
	}
	if err := delim('{'); err != nil {
		return nil, fmt.Errorf("want a JSON object {\"stores\": [...]}: %w", err)
	}
	var specs []storeSpec
	seenStores := false
	for dec.More() {
		off := next(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineAt(off), err)
		}
		if key, _ := tok.(string); key != "stores" || seenStores {
			return nil, fmt.Errorf("line %d: json: unknown or repeated field %q (want one \"stores\")", lineAt(off), tok)
		}
		seenStores = true
		if err := delim('['); err != nil {
			return nil, err
		}
		for dec.More() {
			off := next(dec.InputOffset())
			var s storeSpec
			if err := dec.Decode(&s); err != nil {
				return nil, fmt.Errorf("store %d (line %d): %w", len(specs)+1, lineAt(off), err)
			}
			s.line = lineAt(off)
			specs = append(specs, s)
		}
		if err := delim(']'); err != nil {
			return nil, err
		}
	}
	if err := delim('}'); err != nil {
		return nil, err
	}
	off := next(dec.InputOffset())
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("line %d: more after the JSON object: a stores file holds one object {\"stores\": [...]}", lineAt(off))
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
	if err := f.broker.check(); err != nil {
		return err
	}
	f.broker.events = log
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	if f.served, err = serveRelayHTTP(ctx, log, f.http, f.httpPublic, f.ui, names, f.allowed); err != nil {
		return err
	}
	defer f.served.close()

	// One pool per distinct URL, shared by its stores (and their budget),
	// opened in the background: a store runs once its database is open.
	// The supervisor outlives a broker connection closed for good.
	var br atomic.Pointer[broker]
	sup, err := newSupervisor(log, f, specs, base, budget, func() txbox.Publisher { return br.Load().pub })
	if err != nil {
		return err
	}
	defer sup.Close()
	f.served.setSupervisor(sup)
	if f.ui {
		if err := f.served.mountGroupUI(log, specs, sup, uiToken(f.uiToken), f.uiTables(), f.broker.mode()); err != nil {
			return err
		}
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
		return groupStores(f)
	}
	return reconnecting(ctx, log, out, f, func(b *broker) error {
		br.Store(b)
		return groupWith(ctx, log, out, f, sup, b, budget, groupStopTimeout(base), hup, load)
	})
}

func migrateStore(ctx context.Context, log *slog.Logger, db *database, s supervise.Store) error {
	tf := tableFlags{schema: s.Schema, table: cmp.Or(s.Table, txbox.DefaultTable), log: log.With("store", s.Name)}
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
