package drivertest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

// testPipelines checks txboxdriver.QueryBeginner, txboxdriver.ExecCommitter and
// txboxdriver.ChainBeginner (testChain) where the driver has them: what the statements sent at once do is what they
// would do one by one, a failure commits nothing, and no failure keeps a
// connection from the pool.
func (s *suite[TTx]) testPipelines(t *testing.T) {
	// A connection kept by a failure would make a later BeginQuery wait
	// for one: the deadline turns that into an error.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	drv := s.newDriver(t)
	pool := drv.Pool()
	qb, ok := pool.(txboxdriver.QueryBeginner)
	if !ok {
		t.Skip("the driver's Pool is not a txboxdriver.QueryBeginner")
	}
	ph := "?"
	if drv.Dialect() == txboxdriver.Postgres {
		ph = "$1"
	}
	_, err := pool.Exec(ctx, "CREATE TABLE drivertest_pipeline (n INT PRIMARY KEY)")
	must(t, err, "create table")
	insert := func(n int) txboxdriver.Statement {
		return txboxdriver.Statement{SQL: "INSERT INTO drivertest_pipeline (n) VALUES (" + ph + ")", Args: []any{n}}
	}
	selectAll := txboxdriver.Statement{SQL: "SELECT n FROM drivertest_pipeline ORDER BY n"}
	read := func(rows txboxdriver.Rows) []int {
		t.Helper()
		defer rows.Close()
		var ns []int
		for rows.Next() {
			var n int
			must(t, rows.Scan(&n), "scan")
			ns = append(ns, n)
		}
		must(t, rows.Err(), "rows")
		return ns
	}
	committed := func() []int {
		t.Helper()
		rows, err := pool.Query(ctx, selectAll.SQL)
		must(t, err, "select")
		return read(rows)
	}

	// The query sees the setup; ExecCommit commits both.
	tx, rows, err := qb.BeginQuery(ctx, txboxdriver.TxOptions{}, []txboxdriver.Statement{insert(1), insert(2)}, selectAll)
	must(t, err, "BeginQuery")
	if got := read(rows); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("the query saw %v, want the setup's [1 2]", got)
	}
	ec, ok := tx.(txboxdriver.ExecCommitter)
	if !ok {
		_ = tx.Rollback(ctx)
		t.Skip("BeginQuery's Tx is not a txboxdriver.ExecCommitter")
	}
	n, err := ec.ExecCommit(ctx, insert(3).SQL, insert(3).Args...)
	must(t, err, "ExecCommit")
	if n != 1 {
		t.Errorf("ExecCommit affected %d rows, want 1", n)
	}
	_ = tx.Rollback(ctx) // harmless after ExecCommit
	if got := committed(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("committed %v, want [1 2 3]", got)
	}

	// Rollback undoes the setup.
	tx, rows, err = qb.BeginQuery(ctx, txboxdriver.TxOptions{Isolation: txboxdriver.LevelReadCommitted}, []txboxdriver.Statement{insert(4)}, selectAll)
	must(t, err, "BeginQuery")
	read(rows)
	must(t, tx.Rollback(ctx), "Rollback")

	// Failures, many more than the pool holds connections: each commits
	// nothing and gives its connection back.
	for i := range 20 {
		// A setup statement fails (a duplicate key).
		if tx, _, err := qb.BeginQuery(ctx, txboxdriver.TxOptions{}, []txboxdriver.Statement{insert(10 + i), insert(1)}, selectAll); err == nil {
			_ = tx.Rollback(ctx)
			t.Fatal("BeginQuery: no error from a setup statement that failed")
		}
		// The query fails: from BeginQuery or from its rows.
		tx, rows, err := qb.BeginQuery(ctx, txboxdriver.TxOptions{}, []txboxdriver.Statement{insert(30 + i)}, txboxdriver.Statement{SQL: "SELECT n FROM drivertest_no_such_table"})
		if err == nil {
			for rows.Next() {
			}
			err = errors.Join(rows.Err(), rows.Close())
			_ = tx.Rollback(ctx)
			if err == nil {
				t.Fatal("no error from a query of a missing table")
			}
		}
		// ExecCommit's statement fails: nothing commits, Rollback ends it.
		tx, rows, err = qb.BeginQuery(ctx, txboxdriver.TxOptions{}, []txboxdriver.Statement{insert(50 + i)}, selectAll)
		must(t, err, "BeginQuery")
		read(rows)
		if _, err := tx.(txboxdriver.ExecCommitter).ExecCommit(ctx, insert(2).SQL, insert(2).Args...); err == nil {
			t.Fatal("ExecCommit: no error from a duplicate key")
		}
		must(t, tx.Rollback(ctx), "Rollback after a failed ExecCommit statement")
	}
	if got := committed(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("after the failures committed %v, want [1 2 3]", got)
	}
	testChain(t, ctx, pool, qb, insert, selectAll, read, committed)
	// Every connection came back: as many transactions as the suite
	// promises connections are open at once.
	var txs []txboxdriver.Tx
	for range 8 {
		tx, rows, err := qb.BeginQuery(ctx, txboxdriver.TxOptions{}, nil, selectAll)
		must(t, err, "BeginQuery after the failures (a connection kept?)")
		read(rows)
		txs = append(txs, tx)
	}
	for _, tx := range txs {
		must(t, tx.Rollback(ctx), "Rollback")
	}
}

// testChain checks txboxdriver.ChainBeginner where BeginQuery's Tx has it: the
// statement commits, then the next transaction's setup and query run and
// see it; a failing statement commits nothing and runs nothing after it; a
// failure after the COMMIT leaves it committed and ends the new
// transaction. Rows 1, 2 and 3 are committed when it starts.
func testChain(t *testing.T, ctx context.Context, pool txboxdriver.Pool, qb txboxdriver.QueryBeginner, insert func(int) txboxdriver.Statement,
	selectAll txboxdriver.Statement, read func(txboxdriver.Rows) []int, committed func() []int) {
	t.Helper()
	tx, rows, err := qb.BeginQuery(ctx, txboxdriver.TxOptions{}, nil, selectAll)
	must(t, err, "BeginQuery")
	read(rows)
	cb, ok := tx.(txboxdriver.ChainBeginner)
	if !ok {
		_ = tx.Rollback(ctx)
		return // optional
	}
	// The statement commits; the next transaction's setup and query see it.
	done, next, rows, err := cb.ExecCommitBeginQuery(ctx, insert(4), txboxdriver.TxOptions{}, []txboxdriver.Statement{insert(5)}, selectAll)
	must(t, err, "ExecCommitBeginQuery")
	if !done {
		t.Fatal("ExecCommitBeginQuery succeeded but says nothing committed")
	}
	if got := read(rows); !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("the chained query saw %v, want [1 2 3 4 5]", got)
	}
	must(t, next.Rollback(ctx), "Rollback of the chained transaction")
	if got := committed(); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("committed %v, want [1 2 3 4] (4 committed, the chained 5 rolled back)", got)
	}
	for i := range 10 {
		// The statement fails: nothing commits, nothing after it runs.
		tx, rows, err := qb.BeginQuery(ctx, txboxdriver.TxOptions{}, []txboxdriver.Statement{insert(60 + i)}, selectAll)
		must(t, err, "BeginQuery")
		read(rows)
		done, next, _, err := tx.(txboxdriver.ChainBeginner).ExecCommitBeginQuery(ctx, insert(1), txboxdriver.TxOptions{}, []txboxdriver.Statement{insert(70 + i)}, selectAll)
		if err == nil || done || next != nil {
			t.Fatalf("a failing statement: committed %v, next %v, error %v; want an error alone", done, next, err)
		}
		must(t, tx.Rollback(ctx), "Rollback after a failed chain")
		// The next transaction's setup fails after the COMMIT (a
		// duplicate key): the statement stays committed, the new
		// transaction is ended.
		tx, rows, err = qb.BeginQuery(ctx, txboxdriver.TxOptions{}, nil, selectAll)
		must(t, err, "BeginQuery")
		read(rows)
		done, next, _, err = tx.(txboxdriver.ChainBeginner).ExecCommitBeginQuery(ctx, insert(80+i), txboxdriver.TxOptions{}, []txboxdriver.Statement{insert(90 + i), insert(1)}, selectAll)
		if err == nil || !done || next != nil {
			t.Fatalf("a failing setup after the COMMIT: committed %v, next %v, error %v; want committed and an error", done, next, err)
		}
	}
	want := []int{1, 2, 3, 4}
	for i := range 10 {
		want = append(want, 80+i)
	}
	if got := committed(); !slices.Equal(got, want) {
		t.Fatalf("after the chain's failures committed %v, want %v", got, want)
	}
	// Leave 1, 2 and 3 only, as testPipelines expects.
	_, err = pool.Exec(ctx, "DELETE FROM drivertest_pipeline WHERE n > 3")
	must(t, err, "delete")
}
