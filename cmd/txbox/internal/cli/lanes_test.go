package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
)

// On PostgreSQL the relay takes the table's lanes (every one, alone) and
// gives them up when it stops.
func TestRelayLanes(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		admin, schema := pgSchema(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out, errOut testenv.Buffer
		done := make(chan error, 1)
		go func() {
			done <- cli.Run(ctx, []string{"relay", "--migrate", "--db", testenv.PostgresURL(), "--schema", schema,
				"--broker", testenv.NATSURL(), "--stream", strings.ToUpper(testenv.Name("LANES")), "--stream-subjects", testenv.Subject() + ">",
				"--stats-interval", "0"}, &out, &errOut)
		}()
		owned := func() (owners, lanes int) {
			err := admin.QueryRow(ctx, "SELECT count(DISTINCT owner), count(owner) FROM "+schema+".txbox_outbox_lanes WHERE expires_at > now()").Scan(&owners, &lanes)
			if err != nil {
				return 0, 0 // not migrated yet
			}
			return owners, lanes
		}
		testenv.Await(t, "the relay holding all 64 lanes alone", func() (bool, string) {
			select {
			case err := <-done:
				t.Fatalf("relay exited: %v\n%s", err, errOut.String())
			default:
			}
			o, l := owned()
			return o == 1 && l == 64, fmt.Sprintf("it holds %d lanes (%d owners); stderr:\n%s", l, o, errOut.String())
		})
		cancel()
		select {
		case err := <-done:
			testenv.Must(t, err, "relay")
		case <-time.After(30 * time.Second):
			t.Fatal("relay did not stop")
		}
		if o, l := owned(); l != 0 {
			t.Fatalf("after stop %d lanes are still leased (%d owners)", l, o)
		}
	})
}
