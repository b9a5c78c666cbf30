package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
)

// secret is the password of every URL below; it must never be printed.
const secret = "S3CRET"

// mainOutput runs txbox as the program does and returns all it printed
// (stdout, then stderr with the error) and its exit code.
func mainOutput(ctx context.Context, args ...string) (string, int) {
	var out, errOut testenv.Buffer
	code := cli.Main(ctx, args, &out, &errOut)
	return out.String() + errOut.String(), code
}

// checkRedacted fails t if output holds the secret (raw, or
// percent-encoded as %53%33…) or lacks want, what is wrong.
func checkRedacted(t *testing.T, what, output, want string) {
	t.Helper()
	if strings.Contains(output, secret) || strings.Contains(output, "S3C RET") || strings.Contains(output, "pa/S3") {
		t.Errorf("%s prints the password:\n%s", what, output)
	}
	if !strings.Contains(output, want) {
		t.Errorf("%s: output lacks %q:\n%s", what, want, output)
	}
}

// Every URL flag and variable, malformed or pointing nowhere, fails with an
// error that says what is wrong and holds no password: url.Parse errors
// (which quote the URL), pgx's and go-sql-driver's errors, Redis, NATS and
// Kafka errors.
func TestURLPasswordsNeverPrinted(t *testing.T) {
	t.Parallel()
	sqlite := emptySQLite(t, "r.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "status", "--db", "postgres://u:" + secret + "@host:badport/db"}, `invalid port ":badport"`},
		{[]string{"migrate", "up", "--db", "postgres://u:S3C RET@host/db"}, "invalid userinfo"},
		{[]string{"migrate", "up", "--db", "postgres://u:pa/" + secret + "@host/db"}, "must be percent-encoded"},
		{[]string{"migrate", "up", "--db", "postgres://u:a%zz" + secret + "@host/db"}, "invalid %-escape"},
		{[]string{"migrate", "up", "--db", "u:" + secret + "@host/db"}, "unsupported database URL"},
		{[]string{"migrate", "up", "--db", "postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=disable"}, "connect to postgres://u:xxxxx@127.0.0.1:1/db"},
		{[]string{"migrate", "up", "--db", "postgres://u@127.0.0.1:1/db?sslmode=disable&password=" + secret}, "password=xxxxx"},
		{[]string{"migrate", "up", "--db", "postgres://u:" + secret + "@127.0.0.1/db?sslmode=bogus"}, "sslmode"},
		{[]string{"dead", "list", "--db", "mysql://u:" + secret + "@host:badport/db"}, "malformed URL"},
		{[]string{"dead", "list", "--db", "mysql://u:" + secret + "@127.0.0.1:1/db"}, "connect to mysql://u:xxxxx@127.0.0.1:1/db"},
		{[]string{"dead", "list", "--db", "mysql://u:" + secret + "@127.0.0.1/db?parseTime=maybe"}, "invalid bool"},
		{[]string{"migrate", "sql", "--db", "oracle://u:" + secret + "@h/db"}, "unsupported database URL"},
		{[]string{"relay", "--db", sqlite, "--broker", "kafka://u:" + secret + "@h:9092"}, "kafka:// takes no user name or password"},
		{[]string{"relay", "--db", sqlite, "--broker", "kafka://h:9092,u:" + secret + "@h2:bad"}, "kafka:// takes no user name or password"},
		{[]string{"relay", "--db", sqlite, "--broker", "nats://u:" + secret + "@h:bad"}, "malformed URL"},
		{[]string{"relay", "--db", sqlite, "--broker", "nats://a:4222,nats://u:" + secret + "@h:bad"}, "malformed URL"},
		{[]string{"relay", "--db", sqlite, "--broker", "nats://u:" + secret + "@127.0.0.1:1"}, "connect to NATS at nats://u:xxxxx@127.0.0.1:1"},
		{[]string{"relay", "--db", sqlite, "--broker", "redis://u:" + secret + "@h:bad/0"}, "malformed URL"},
		{[]string{"relay", "--db", sqlite, "--broker", "redis://u:" + secret + "@127.0.0.1:1/0"}, "connect to Redis at redis://u:xxxxx@127.0.0.1:1/0"},
		{[]string{"relay", "--db", sqlite, "--broker", "asynq+redis://u:" + secret + "@h:bad/0"}, "malformed URL"},
		{[]string{"relay", "--db", sqlite, "--broker", "mqtt://u:" + secret + "@h:bad/"}, "unsupported broker"},
		{[]string{"relay", "--db", sqlite, "--broker", "amqp://u:" + secret + "@h:bad/"}, "malformed URL"},
		{[]string{"relay", "--db", sqlite, "--broker", "u:" + secret + "@h:4222"}, "want a URL"},
		{[]string{"bench", "brokers", "--redis", "redis://u:" + secret + "@h:bad/0"}, "--redis"},
		{[]string{"bench", "brokers", "--rabbitmq", "amqp://u:" + secret + "@h:bad/"}, "--rabbitmq"},
		{[]string{"bench", "drain", "--broker", "nats://u:" + secret + "@h:bad"}, "--broker"},
		{[]string{"bench", "drain", "--db", "postgres://u:" + secret + "@h:bad/x"}, "--db"},
		{[]string{"relay", "--batch-size", "u:" + secret + "@x"}, "--batch-size"},
	} {
		// The relay waits for an unreachable broker, logging each try,
		// until its context ends; then it exits 0.
		// It runs for 500ms, then twice as long each time until it has
		// logged a try, however slow the machine.
		waits := tc.args[0] == "relay" && strings.HasPrefix(tc.want, "connect to ")
		limit := time.Minute
		if waits {
			limit = 500 * time.Millisecond
		}
		var out string
		var code int
		for {
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			out, code = mainOutput(ctx, tc.args...)
			cancel()
			if !waits || strings.Contains(out, tc.want) || limit >= time.Minute {
				break
			}
			limit *= 2
		}
		if code == 0 && !waits {
			t.Errorf("txbox %v succeeded:\n%s", tc.args, out)
		}
		checkRedacted(t, strings.Join(tc.args, " "), out, tc.want)
	}
}

// pgx's connect error, one line per address and TLS mode tried (with the
// default sslmode=prefer, the same refusal twice), is printed as one line,
// without tabs and without repeating itself.
func TestConnectErrorOneLine(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, code := mainOutput(ctx, "stats", "--db", "postgres://u:"+secret+"@127.0.0.1:1/db")
	if code == 0 {
		t.Fatalf("stats on a closed port succeeded:\n%s", out)
	}
	checkRedacted(t, "stats", out, "connect to postgres://u:xxxxx@127.0.0.1:1/db")
	if strings.Count(strings.TrimSpace(out), "\n") != 0 || strings.Contains(out, "\t") || strings.Contains(out, `\t`) ||
		strings.Count(out, "connection refused") != 1 {
		t.Fatalf("the error is not one line naming the refusal once:\n%s", out)
	}
}

// TXBOX_DB and TXBOX_BROKER are redacted like the flags.
func TestEnvURLPasswordsNeverPrinted(t *testing.T) {
	t.Setenv("TXBOX_DB", "postgres://u:"+secret+"@host:badport/db")
	out, _ := mainOutput(context.Background(), "migrate", "up")
	checkRedacted(t, "TXBOX_DB", out, "TXBOX_DB")
	t.Setenv("TXBOX_DB", "sqlite://"+filepath.Join(t.TempDir(), "e.db"))
	t.Setenv("TXBOX_BROKER", "nats://u:"+secret+"@h:bad")
	out, _ = mainOutput(context.Background(), "relay")
	checkRedacted(t, "TXBOX_BROKER", out, "TXBOX_BROKER")
}

// The relay's start-up log names the database and the broker without
// their passwords (PostgreSQL trusts, and NATS ignores, the ones given).
func TestRelayLogsRedacted(t *testing.T) {
	t.Parallel()
	_, schema := pgSchema(t)
	testenv.NATS(t)
	db := strings.Replace(testenv.PostgresURL(), "postgres@", "postgres:"+secret+"@", 1)
	if !strings.Contains(db, secret) {
		t.Fatalf("test URL %s has no password", db)
	}
	broker := strings.Replace(testenv.NATSURL(), "nats://", "nats://u:"+secret+"@", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"relay", "--migrate", "--db", db, "--schema", schema, "--broker", broker,
			"--stream", strings.ToUpper(testenv.Name("RED")), "--stream-subjects", testenv.Subject() + ">", "--log-level", "debug"}, &out, &errOut)
	}()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(errOut.String(), "relay started") {
		select {
		case code := <-done:
			t.Fatalf("relay exited with %d:\n%s%s", code, out.String(), errOut.String())
		case <-deadline:
			t.Fatalf("no start-up log:\n%s%s", out.String(), errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("relay exit code %d", code)
	}
	all := out.String() + errOut.String()
	checkRedacted(t, "relay logs", all, `db="postgres://postgres:xxxxx@`)
	checkRedacted(t, "relay logs", all, "broker=nats://u:xxxxx@")
	if !strings.Contains(all, "schema="+schema+" table=txbox_outbox") {
		t.Errorf("the start-up line does not name the schema and table:\n%s", all)
	}
}
