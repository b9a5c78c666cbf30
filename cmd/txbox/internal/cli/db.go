package cli

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	_ "modernc.org/sqlite" // the SQLite engine behind sqlite:// URLs

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// dbTarget is a parsed --db URL.
type dbTarget struct {
	dialect txboxdriver.Dialect
	url     string // postgres, mysql: the URL as given
	path    string // sqlite: the file
	dsn     string // mysql: the go-sql-driver DSN
}

// parseDB parses a --db URL: postgres://…, postgresql://…,
// mysql://user:pass@host:3306/db, sqlite://path or sqlite:path.
func parseDB(raw string) (dbTarget, error) { return parseDBFrom("--db", raw) }

// parseDBFrom is parseDB for the value of name, --db or TXBOX_DB, which its
// errors name.
func parseDBFrom(name, raw string) (dbTarget, error) {
	switch {
	case strings.HasPrefix(raw, "mysql://"), strings.HasPrefix(raw, "mariadb://"):
		dsn, err := mysqlDSNFrom(name, raw)
		if err != nil {
			return dbTarget{}, err
		}
		return dbTarget{dialect: txboxdriver.MySQL, url: raw, dsn: dsn}, nil
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		if _, err := parseURL(name, raw); err != nil {
			return dbTarget{}, err
		}
		return dbTarget{dialect: txboxdriver.Postgres, url: raw}, nil
	case strings.HasPrefix(raw, "sqlite:"):
		p := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite:"), "//")
		if p == "" {
			return dbTarget{}, fmt.Errorf("%s %q: no file name (want sqlite://path/to/file.db)", name, raw)
		}
		if strings.Contains(p, "?") {
			return dbTarget{}, fmt.Errorf("%s %q: query parameters are not supported: txbox sets the SQLite pragmas itself", name, raw)
		}
		return dbTarget{dialect: txboxdriver.SQLite, path: p}, nil
	case raw == "":
		return dbTarget{}, fmt.Errorf("%s is empty (want postgres://…, mysql://… or sqlite://path)", name)
	}
	return dbTarget{}, fmt.Errorf("%s %q: unsupported database URL (want postgres://…, postgresql://…, mysql://… or sqlite://path)", name, redact(raw, raw))
}

// mysqlDSN is txboxsql.MySQLDSN for --db, checked with go-sql-driver's
// ParseDSN.
func mysqlDSN(raw string) (string, error) { return mysqlDSNFrom("--db", raw) }

// mysqlDSNFrom is mysqlDSN for the value of name, which its errors name.
// A URL that does not parse is reported by parseURL, redacted; MySQLDSN's
// other errors quote nothing of the URL, and are left as they are, so that
// their example URL keeps its "user:pass".
func mysqlDSNFrom(name, raw string) (string, error) {
	if _, err := parseURL(name, raw); err != nil {
		return "", err
	}
	dsn, err := txboxsql.MySQLDSN(raw)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", name, redact(raw, raw), err)
	}
	if _, err := mysqldrv.ParseDSN(dsn); err != nil {
		return "", fmt.Errorf("%s %q: %w", name, redact(raw, raw), redactErr(err, raw, dsn))
	}
	return dsn, nil
}

// String is the target for messages, without a password.
func (t dbTarget) String() string {
	if t.dialect == txboxdriver.SQLite {
		return "sqlite:" + t.path
	}
	return redact(t.url, t.url)
}

// onDriver builds a tool (dead.New, inspect.New) over d's driver, whichever
// of the two it is.
func onDriver[T any](d *database, cfg txbox.Config,
	withPgx func(txboxdriver.Driver[pgx.Tx], txbox.Config) (T, error),
	withSQL func(txboxdriver.Driver[*sql.Tx], txbox.Config) (T, error)) (T, error) {
	if d.pgx != nil {
		return withPgx(d.pgx, cfg)
	}
	return withSQL(d.sql, cfg)
}

// openTool opens f's database and builds a tool over it with onDriver; the
// returned func closes the database.
func openTool[T any](cmd *cobra.Command, f *tableFlags,
	withPgx func(txboxdriver.Driver[pgx.Tx], txbox.Config) (T, error),
	withSQL func(txboxdriver.Driver[*sql.Tx], txbox.Config) (T, error)) (T, func(), error) {
	var zero T
	db, err := f.open(cmd.Context())
	if err != nil {
		return zero, nil, err
	}
	t, err := onDriver(db, txbox.Config{Schema: f.schema, Table: f.table}, withPgx, withSQL)
	if err != nil {
		db.Close()
		return zero, nil, err
	}
	return t, db.Close, nil
}

// database is an open, caller-owned pool behind one of txbox's drivers.
type database struct {
	target dbTarget
	pgx    *txboxpgx.Driver // PostgreSQL
	pool   *pgxpool.Pool
	sql    *txboxsql.Driver // SQLite, MySQL
	db     *sql.DB
}

// openDB opens and pings the database named by raw, creating a missing
// SQLite file as migrate up does.
func openDB(ctx context.Context, raw string) (*database, error) {
	t, err := parseDB(raw)
	if err != nil {
		return nil, err
	}
	return openTarget(ctx, t, createFile)
}

// Whether openTarget may create a missing SQLite file.
const (
	mustExist  = false // every command but migrate up: a mistyped path is an error, not a new empty file
	createFile = true  // migrate up, and relay --migrate
)

// openTarget opens and pings the database t. Unless create is set, a
// SQLite file that does not exist is an error and is not created.
func openTarget(ctx context.Context, t dbTarget, create bool) (*database, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	switch t.dialect {
	case txboxdriver.Postgres:
		pool, err := pgxpool.New(ctx, t.url)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", t, redactErr(err, t.url, t.dsn))
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("connect to %s: %w", t, redactErr(err, t.url, t.dsn))
		}
		return &database{target: t, pgx: txboxpgx.New(pool), pool: pool}, nil
	case txboxdriver.MySQL:
		db, err := sql.Open("mysql", t.dsn)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", t, redactErr(err, t.url, t.dsn))
		}
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("connect to %s: %w", t, redactErr(err, t.url, t.dsn))
		}
		return &database{target: t, sql: txboxsql.New(db, txboxdriver.MySQL), db: db}, nil
	default:
		dsn := txboxsql.SQLiteDSN(t.path)
		if !create {
			if _, err := os.Stat(t.path); errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("open %s: the file does not exist (check the path; txbox migrate up creates it)", t)
			}
			// Should the file vanish after the check, SQLite still does
			// not create it.
			dsn += "&mode=rw"
		}
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", t, redactErr(err, t.url, t.dsn))
		}
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open %s: %w", t, redactErr(err, t.url, t.dsn))
		}
		return &database{target: t, sql: txboxsql.New(db, txboxdriver.SQLite), db: db}, nil
	}
}

// transient reports whether err says the database failed (a lost
// connection, a shutdown, a deadlock) rather than the work asked of it:
// txboxdriver.IsTransientFor, with the driver's own classifier.
func (d *database) transient(err error) bool {
	if d.pgx != nil {
		return txboxdriver.IsTransientFor(d.pgx, err)
	}
	return txboxdriver.IsTransientFor(d.sql, err)
}

func (d *database) Close() {
	if d.pool != nil {
		d.pool.Close()
	}
	if d.db != nil {
		_ = d.db.Close()
	}
}

func (d *database) claimCheck(cfg claimcheck.Config) (*claimcheck.Store, error) {
	if d.pgx != nil {
		return claimcheck.New[pgx.Tx](d.pgx, cfg)
	}
	return claimcheck.New[*sql.Tx](d.sql, cfg)
}

func (d *database) migrator(cfg txboxmigrate.Config) (*txboxmigrate.Migrator, error) {
	if d.pgx != nil {
		return txboxmigrate.New[pgx.Tx](d.pgx, cfg)
	}
	return txboxmigrate.New[*sql.Tx](d.sql, cfg)
}

// relay returns a relay of cfg that also sweeps the claim check tables
// claims (in cfg.Schema, against cfg.Table) with retention.
func (d *database) relay(pub txbox.Publisher, cfg relay.Config, claims []string, retention time.Duration) (*relay.Relay, error) {
	cfg.ClaimChecks = nil
	for _, table := range claims {
		st, err := d.claimCheck(claimcheck.Config{Schema: cfg.Schema, Table: table, OutboxTables: []string{cmp.Or(cfg.Table, txbox.DefaultTable)}, Retention: retention})
		if err != nil {
			return nil, fmt.Errorf("claim check table %q: %w", table, err)
		}
		cfg.ClaimChecks = append(cfg.ClaimChecks, st)
	}
	if d.pgx != nil {
		return relay.New[pgx.Tx](d.pgx, pub, cfg)
	}
	return relay.New[*sql.Tx](d.sql, pub, cfg)
}
