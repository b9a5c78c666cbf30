package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txbox/txbox/tests/testenv"
)

// The dashboard of a relay with several stores shows, on each store's
// page, how the relay publishes (the Kafka producer's mode and
// transactional id), escaped, and in that store's api/state, as the
// dashboard of a relay with one store does.
func TestRelayGroupUIShowsPublisher(t *testing.T) {
	t.Parallel()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	testenv.Must(t, err, "kfake")
	t.Cleanup(kc.Close)
	const id, idHTML = `<orders>-1`, `&lt;orders&gt;-1`
	for _, c := range []struct {
		args       []string
		want, html string
	}{
		{[]string{"--kafka-transactional-id", id}, "Kafka, transactional id " + id, "Kafka, transactional id " + idHTML},
		{nil, "Kafka, idempotent producer (no transactions)", "Kafka, idempotent producer (no transactions)"},
	} {
		dir := t.TempDir()
		file := filepath.Join(dir, "stores.json")
		testenv.Must(t, os.WriteFile(file, []byte(fmt.Sprintf(`{"stores": [
			{"name": "a", "db": %q},
			{"name": "b", "db": %q}
		]}`, "sqlite://"+filepath.Join(dir, "a.db"), "sqlite://"+filepath.Join(dir, "b.db"))), 0o600), "write stores file")
		r := startGroupRelay(t, append([]string{"--migrate", "--stores", file, "--ui", "--broker", "kafka://" + strings.Join(kc.ListenAddrs(), ",")}, c.args...)...)
		testenv.Await(t, "both stores added", func() (bool, string) {
			return strings.Count(r.errOut.String(), `msg="store added"`) == 2, r.errOut.String()
		})
		for i, store := range []string{"a", "b"} {
			var state struct {
				Relays []struct {
					Name      string `json:"name"`
					Publisher string `json:"publisher"`
				} `json:"relays"`
			}
			body := ""
			testenv.Await(t, "store "+store+"'s api/state", func() (bool, string) {
				var code int
				code, body = r.get(fmt.Sprintf("/ui/store/%d/api/state", i))
				return code == http.StatusOK, body
			})
			testenv.Must(t, json.Unmarshal([]byte(body), &state), "api/state %s", body)
			if len(state.Relays) != 1 || state.Relays[0].Publisher != c.want {
				t.Errorf("store %s's api/state relays %+v, want one publishing as %q", store, state.Relays, c.want)
			}
			code, page := r.get("/ui/?store=" + store)
			if code != http.StatusOK || !strings.Contains(page, `<span class="note publisher">`+c.html+`</span>`) {
				t.Errorf("store %s's dashboard %d does not show the publisher %q:\n%s", store, code, c.html, page)
			}
			if strings.Contains(page, id) {
				t.Errorf("store %s's dashboard prints the transactional id unescaped", store)
			}
		}
		r.stop()
	}
}
