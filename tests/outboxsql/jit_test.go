package outboxsql_test

import (
	"context"
	"testing"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
)

// Every claim transaction runs with JIT off. The claim's generic plan
// costs more the larger the table, and past jit_above_cost every claim
// compiled itself with LLVM: a relay on a 400,000-row backlog drained at a
// sixth of its rate (docs/guide/scaling.md). The claims' transactions must say
// off, and the connection keeps its own setting after them.
func TestClaimsRunWithoutJIT(t *testing.T) {
	t.Parallel()
	pool, _, store := pgClaims(t, 4)
	ctx := context.Background()
	var before string
	testenv.Must(t, pool.QueryRow(ctx, "SELECT current_setting('jit')").Scan(&before), "session jit")
	if before != "on" {
		t.Skipf("the server runs with jit = %s: nothing to turn off", before)
	}
	lanes, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-jit")
	testenv.Must(t, err, "lanes")
	claims := map[string]func() (*outboxsql.Batch, error){
		"claim":       func() (*outboxsql.Batch, error) { return store.Claim(ctx, 10, 0) },
		"lanes claim": func() (*outboxsql.Batch, error) { return lanes.Claim(ctx, 10, nil) },
	}
	for name, claim := range claims {
		b, err := claim()
		testenv.Must(t, err, "%s", name)
		jit := ""
		rows, err := b.Tx().Query(ctx, "SELECT current_setting('jit')")
		testenv.Must(t, err, "%s: read jit", name)
		for rows.Next() {
			testenv.Must(t, rows.Scan(&jit), "%s: scan jit", name)
		}
		rows.Close()
		if jit != "off" {
			t.Errorf("%s: the claim transaction runs with jit = %s, want off", name, jit)
		}
		testenv.Must(t, b.Release(ctx), "%s: release", name)
	}
	var jit string
	testenv.Must(t, pool.QueryRow(ctx, "SELECT current_setting('jit')").Scan(&jit), "session jit")
	if jit != "on" {
		t.Errorf("after the claims the connection has jit = %s, want its own setting (on) back", jit)
	}
}
