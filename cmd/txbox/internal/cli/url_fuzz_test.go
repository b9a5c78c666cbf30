package cli

import (
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/txbox/txbox/txboxdriver"
)

// FuzzParseURLs feeds any text to the CLI's URL parsers: the database URL
// (parseDBFrom, with mysqlDSNFrom for mysql:// and mariadb://) and the
// broker URL (checkBrokerURL). The properties: neither panics; an error
// names the flag; what is accepted is what the flag's documentation says
// (the dialect of the URL's scheme; postgres:// kept as given and parsed by
// url.Parse; a MySQL DSN that go-sql-driver parses back to the URL's user,
// password, host and database, with parseTime=true unless the URL sets it;
// a SQLite file name, without '?'; a broker scheme txbox supports, each
// server of a NATS list a URL, each Kafka seed host:port without userinfo).
// FuzzRedactPassword checks that none of their output holds a password.
func FuzzParseURLs(f *testing.F) {
	for _, s := range []string{
		"postgres://u:pw@host:5432/db?sslmode=disable", "postgresql://h/db", "postgres://u:p/w@h/db",
		"postgres://u:a%zz@h/db", "postgres://h:bad/db", "mysql://root:pw@127.0.0.1:3306/test",
		"mysql://u:p%40ss@h/db?parseTime=false", "mariadb://u@h/db?tls=true", "mysql://u:pw@h", "mysql://u:pw@/db",
		"mysql://u@h/a/b", "mysql://u@[::1]/db", "mysql://u@h/db?parseTime=maybe", "sqlite://x.db", "sqlite:/tmp/a b.db", "sqlite://",
		"sqlite:x.db?mode=ro", "", "oracle://u:pw@h/db", "nats://127.0.0.1:4222", "nats://a:4222,nats://u:pw@b:4222",
		"nats://a:4222, b:4222", "tls://h:4222", "amqp://guest:guest@h:5672/vhost", "amqps://h/", "redis://h:6379/0",
		"rediss://:pw@h:6379/0?maxlen=10", "asynq+redis://h:6379/0?queue=q", "kafka://h:9092,h2:9092", "kafka://u:pw@h:9092",
		"kafka://h", "kafka://", "mqtt://h", "u:pw@h:4222", "nats://u:pw@h:bad", "redis://h:6379/0#frag",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		checkDBURL(t, raw)
		checkBroker(t, raw)
	})
}

func checkDBURL(t *testing.T, raw string) {
	target, err := parseDBFrom("--db", raw)
	if err != nil {
		if !strings.HasPrefix(err.Error(), "--db ") {
			t.Fatalf("parseDBFrom(%q): error does not name the flag: %v", raw, err)
		}
		return
	}
	switch {
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		if target.dialect != txboxdriver.Postgres || target.url != raw {
			t.Fatalf("parseDBFrom(%q) = %+v, want PostgreSQL with the URL as given", raw, target)
		}
		if _, err := url.Parse(raw); err != nil {
			t.Fatalf("parseDBFrom(%q) accepted a URL that url.Parse refuses: %v", raw, err)
		}
	case strings.HasPrefix(raw, "mysql://"), strings.HasPrefix(raw, "mariadb://"):
		if target.dialect != txboxdriver.MySQL {
			t.Fatalf("parseDBFrom(%q) = %+v, want MySQL", raw, target)
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("parseDBFrom(%q) accepted a URL that url.Parse refuses: %v", raw, err)
		}
		cfg, err := mysqldrv.ParseDSN(target.dsn)
		if err != nil {
			t.Fatalf("parseDBFrom(%q): DSN %q does not parse: %v", raw, target.dsn, err)
		}
		pw, _ := u.User.Password()
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		if cfg.User != u.User.Username() || cfg.Passwd != pw || cfg.DBName != strings.TrimPrefix(u.Path, "/") ||
			cfg.Net != "tcp" || cfg.Addr != addr || u.Hostname() == "" || cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
			t.Fatalf("parseDBFrom(%q): DSN %q reads as user %q, password %q, net %q, addr %q, db %q; want %q, %q, tcp, %q, %q",
				raw, target.dsn, cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName, u.User.Username(), pw, addr, strings.TrimPrefix(u.Path, "/"))
		}
		if !u.Query().Has("parseTime") && !cfg.ParseTime {
			t.Fatalf("parseDBFrom(%q): DSN %q without parseTime=true", raw, target.dsn)
		}
	case strings.HasPrefix(raw, "sqlite:"):
		want := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite:"), "//")
		if target.dialect != txboxdriver.SQLite || target.path != want || want == "" || strings.Contains(want, "?") {
			t.Fatalf("parseDBFrom(%q) = %+v, want SQLite file %q", raw, target, want)
		}
	default:
		t.Fatalf("parseDBFrom(%q) accepted an unsupported URL: %+v", raw, target)
	}
}

func checkBroker(t *testing.T, raw string) {
	scheme, err := checkBrokerURL("--broker", raw)
	if err != nil {
		if !strings.HasPrefix(err.Error(), "--broker ") {
			t.Fatalf("checkBrokerURL(%q): error does not name the flag: %v", raw, err)
		}
		return
	}
	given, rest, _ := strings.Cut(raw, "://")
	if scheme != given || !slices.Contains([]string{"nats", "tls", "amqp", "amqps", "redis", "rediss", "asynq+redis", "asynq+rediss", "kafka"}, scheme) {
		t.Fatalf("checkBrokerURL(%q) = %q, want a supported scheme, the URL's", raw, scheme)
	}
	switch scheme {
	case "kafka":
		hosts, _, _ := strings.Cut(rest, "/")
		hosts, _, _ = strings.Cut(hosts, "?")
		seeds := splitList(hosts)
		if len(seeds) == 0 || strings.Contains(hosts, "@") {
			t.Fatalf("checkBrokerURL(%q) accepted seeds %q", raw, hosts)
		}
		for _, s := range seeds {
			if _, _, err := net.SplitHostPort(s); err != nil {
				t.Fatalf("checkBrokerURL(%q) accepted seed %q: %v", raw, s, err)
			}
		}
	case "nats", "tls":
		for _, server := range splitList(raw) {
			if !strings.Contains(server, "://") {
				server = scheme + "://" + server
			}
			if _, err := url.Parse(server); err != nil {
				t.Fatalf("checkBrokerURL(%q) accepted server %q that url.Parse refuses: %v", raw, server, err)
			}
		}
	default:
		if _, err := url.Parse(strings.TrimPrefix(raw, "asynq+")); err != nil {
			t.Fatalf("checkBrokerURL(%q) accepted a URL that url.Parse refuses: %v", raw, err)
		}
	}
}
