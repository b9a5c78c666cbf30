package migrate_test

import (
	"context"
	"sync"
	"testing"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// Two `txbox migrate up` at once on a fresh schema both succeed: the schema
// and the tracking table are created under a lock, not raced for (which
// failed one of them on pg_namespace_nspname_index). Many rounds, each on a
// schema that does not exist yet.
func TestConcurrentUpOnFreshSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Postgres(t, 8)
	drv := txboxpgx.New(pool)
	const rounds, racers = 25, 3
	for i := 0; i < rounds; i++ {
		schema := testenv.Name("txfresh")
		t.Cleanup(func() {
			if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
				t.Logf("drop schema %s: %v", schema, err)
			}
		})
		var wg sync.WaitGroup
		errs := make([]error, racers)
		applied := make([]int, racers)
		for j := 0; j < racers; j++ {
			m, err := txboxmigrate.New(drv, txboxmigrate.Config{Schema: schema, InboxTables: []string{"inbox"}})
			testenv.Must(t, err, "txboxmigrate.New")
			wg.Add(1)
			go func() {
				defer wg.Done()
				ms, err := m.Up(ctx)
				errs[j], applied[j] = err, len(ms)
			}()
		}
		wg.Wait()
		total := 0
		for j, err := range errs {
			if err != nil {
				t.Fatalf("round %d: Up %d of %d failed: %v", i, j+1, racers, err)
			}
			total += applied[j]
		}
		plan, err := txboxmigrate.Plan(drv.Dialect(), txboxmigrate.Config{Schema: schema, InboxTables: []string{"inbox"}})
		testenv.Must(t, err, "plan")
		if total != len(plan) {
			t.Fatalf("round %d: the Ups applied %d migrations between them, want each of the %d once", i, total, len(plan))
		}
	}
}
