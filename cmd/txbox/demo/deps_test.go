package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The demo program compiles only what the demo runs (SQLite, NATS, cobra):
// none of the other databases, brokers and metrics the txbox program links,
// so that the README's first command stays cheap on an empty module cache.
func TestDemoCompilesOnlySQLiteAndNATS(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	mods := string(out)
	for _, want := range []string{"modernc.org/sqlite", "github.com/nats-io/nats-server/v2"} {
		if !strings.Contains(mods, want+"\n") {
			t.Errorf("the demo does not compile %s", want)
		}
	}
	for _, banned := range []string{"github.com/jackc/pgx", "github.com/go-sql-driver/mysql", "github.com/twmb/franz-go",
		"github.com/hibiken/asynq", "github.com/redis/go-redis", "github.com/rabbitmq/amqp091-go", "github.com/prometheus/",
		"github.com/txbox/txbox/txboxkafka", "github.com/txbox/txbox/txboxrabbitmq", "github.com/txbox/txbox/redisstream",
		"github.com/txbox/txbox/txboxasynq", "github.com/txbox/txbox/txboxpgx", "github.com/txbox/txbox/txboxprom"} {
		if strings.Contains(mods, banned) {
			t.Errorf("the demo compiles %s, which it does not run", banned)
		}
	}
}
