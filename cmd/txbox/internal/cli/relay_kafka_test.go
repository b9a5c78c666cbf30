package cli_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txbox/txbox/tests/testenv"
)

// The relay's start-up line says whether the Kafka producer is
// transactional, and under which transactional id.
func TestRelayLogsKafkaProducer(t *testing.T) {
	t.Parallel()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	testenv.Must(t, err, "kfake")
	t.Cleanup(kc.Close)
	id := testenv.Name("relay")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kafka-transactional-id", id}, "kafka_producer=transactional kafka_transactional_id=" + id},
		{nil, "kafka_producer=idempotent"},
	} {
		db := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
		args := append([]string{"--migrate", "--db", db, "--broker", "kafka://" + strings.Join(kc.ListenAddrs(), ",")}, c.args...)
		logs, stop := relayCmd(t, args...)
		testenv.Await(t, "the relay's start-up line", func() (bool, string) {
			return strings.Contains(logs.String(), "relay started"), logs.String()
		})
		testenv.Must(t, stop(), "stop")
		line := ""
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "relay started") {
				line = l
			}
		}
		if !strings.Contains(line, c.want) {
			t.Errorf("the start-up line lacks %q:\n%s", c.want, line)
		}
	}
}
