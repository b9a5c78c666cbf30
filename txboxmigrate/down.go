package txboxmigrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/txboxdriver"
)

// ErrDataLoss is what Down returns, wrapped, instead of dropping an outbox
// table that holds undelivered messages or an inbox table that holds
// receipts (without them, a redelivered message is handled again).
// DownOptions.Force drops them anyway.
var ErrDataLoss = errors.New("reverting would lose data")

// DownOptions says how far Down goes.
type DownOptions struct {
	// To is the version every configured table goes back to: each applied
	// migration above it is reverted, the newest first. 0 drops the
	// tables. The txbox_migrations table itself stays.
	To int
	// Force drops an outbox table with undelivered messages in it (pending
	// or dead) and an inbox table with receipts in it.
	Force bool
}

// Down reverts the applied migrations numbered above opts.To, the newest
// first, each in its own transaction with the removal of its tracking row
// (on MySQL, whose DDL commits implicitly, the row goes after the DDL, and
// a down interrupted in between is finished by the next Down). It returns
// the migrations it reverted. Stop the relays and consumers of the tables
// first: a release that needs a reverted migration refuses to start, and
// one already running fails its rounds.
//
// Down undoes the schema, not the data: rows that an up migration parked
// dead (the contract migrations) stay dead.
func (m *Migrator) Down(ctx context.Context, opts DownOptions) ([]Migration, error) {
	if opts.To < 0 {
		return nil, fmt.Errorf("%w: down to version %d: want 0 or more", txbox.ErrInvalidConfig, opts.To)
	}
	done, err := m.applied(ctx, m.pool)
	if err != nil {
		if m.missingTable(err) {
			return nil, nil // nothing was ever applied
		}
		return nil, fmt.Errorf("txbox: read %s: %w", trackingTable, err)
	}
	for _, n := range m.newer(done) {
		if n.Version > opts.To {
			return nil, fmt.Errorf("txbox: down to version %d: %s version %d (%s) was applied by a newer txbox release, which alone can revert it: run its migrate down first", opts.To, n.Target, n.Version, n.Name)
		}
	}
	var todo []Migration
	for _, mg := range slices.Backward(m.migrations) {
		if _, ok := done[key(mg.Target, mg.Version)]; ok && mg.Version > opts.To {
			todo = append(todo, mg)
		}
	}
	// Refuse before reverting anything, naming every table that would lose
	// rows; revert checks again under the lock.
	var losses []string
	for _, mg := range todo {
		if mg.Version == 1 && !opts.Force {
			loss, err := m.loss(ctx, m.pool, mg.Target)
			if err != nil {
				return nil, fmt.Errorf("txbox: down to version %d: %w", opts.To, err)
			}
			if loss != "" {
				losses = append(losses, loss)
			}
		}
	}
	if len(losses) > 0 {
		return nil, fmt.Errorf("txbox: down to version %d: %w: %s", opts.To, ErrDataLoss, strings.Join(losses, "; "))
	}
	var reverted []Migration
	for _, mg := range todo {
		did, err := m.revert(ctx, mg, opts.Force)
		if err != nil {
			return reverted, fmt.Errorf("txbox: revert migration %s version %d (%s): %w", mg.Target, mg.Version, mg.Name, err)
		}
		if did {
			reverted = append(reverted, mg)
		}
	}
	return reverted, nil
}

func (m *Migrator) revert(ctx context.Context, mg Migration, force bool) (bool, error) {
	return m.step(ctx, mg, true, func(tx txboxdriver.Tx) error {
		if mg.Version == 1 && !force {
			loss, err := m.loss(ctx, tx, mg.Target)
			if err != nil {
				return err
			}
			if loss != "" {
				return fmt.Errorf("%w: %s", ErrDataLoss, loss)
			}
		}
		for _, stmt := range splitStatements(mg.Down) {
			if err := m.execDown(ctx, tx, stmt); err != nil {
				return err
			}
		}
		return m.sql.Forget(ctx, tx, mg.Target, mg.Version)
	})
}

// execDown runs one statement of a down migration in tx, and goes on when
// what it drops or alters is gone already: a table dropped by hand, whose
// migrations are still recorded, is reverted to the end. On PostgreSQL
// and SQLite the statement runs under a savepoint, since a failed
// statement would abort the whole transaction.
func (m *Migrator) execDown(ctx context.Context, tx txboxdriver.Tx, stmt string) error {
	savepoint := m.dialect == txboxdriver.Postgres || m.dialect == txboxdriver.SQLite
	if savepoint {
		if _, err := tx.Exec(ctx, "SAVEPOINT txbox_down"); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, stmt)
	switch {
	case err == nil && savepoint:
		_, err = tx.Exec(ctx, "RELEASE SAVEPOINT txbox_down")
		return err
	case err == nil:
		return nil
	case !m.alreadyGone(err) && !(m.missingTable(err) && !m.transient(err)):
		return err
	case savepoint:
		_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT txbox_down")
		return err
	}
	return nil
}

// loss says which rows dropping target's table would lose: undelivered
// messages (outbox), receipts (inbox), payloads (claim check); "" when
// none.
func (m *Migrator) loss(ctx context.Context, ex txboxdriver.Executor, target string) (string, error) {
	kind, table, _ := strings.Cut(target, ":")
	q := "SELECT count(*) FROM " + sqlname.Qualified(m.dialect, m.schema, table)
	what := "receipt(s) (without them a redelivered message is handled again)"
	switch kind {
	case KindOutbox:
		q += " WHERE published_at IS NULL"
		what = "undelivered message(s) (pending or dead)"
	case KindClaimCheck:
		what = "stored payload(s) (a message that refers to one can no longer be resolved)"
	}
	rows, err := ex.Query(ctx, q)
	if err != nil {
		if m.missingTable(err) {
			return "", nil
		}
		return "", err
	}
	defer rows.Close()
	var n int64
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return "", err
		}
	}
	if err := rows.Err(); err != nil || n == 0 {
		return "", err
	}
	return fmt.Sprintf("%s table %q holds %d %s, which dropping it deletes", kind, m.name(table), n, what), nil
}

// alreadyGone reports whether a down statement failed only because what it
// drops is gone already: on MySQL, whose DDL has no IF EXISTS for
// constraints and columns (1091 "Can't DROP …; check that it exists", 3940
// "Constraint … does not exist"), after a down interrupted before its
// tracking row went. Elsewhere the down SQL says IF EXISTS.
func (m *Migrator) alreadyGone(err error) bool {
	return m.mysqlError(err, 1091, 3940)
}

// alreadyThere is alreadyGone for up statements: on MySQL, whose DDL has no
// IF NOT EXISTS for columns and constraints, a column (1060), an index
// (1061) or a CHECK constraint (MySQL 3822, MariaDB 1826) that an Up
// interrupted before its tracking row added already. Each such ALTER TABLE
// is one statement, done whole or not at all.
func (m *Migrator) alreadyThere(err error) bool {
	return m.mysqlError(err, 1060, 1061, 3822, 1826)
}

// mysqlError reports whether err is, on MySQL, one of the errors numbered
// codes (as go-sql-driver prints them: "Error 1091 (42000): …").
func (m *Migrator) mysqlError(err error, codes ...int) bool {
	if m.dialect != txboxdriver.MySQL {
		return false
	}
	msg := err.Error()
	for _, c := range codes {
		if strings.Contains(msg, fmt.Sprintf("Error %d ", c)) || strings.Contains(msg, fmt.Sprintf("Error %d:", c)) {
			return true
		}
	}
	return false
}
