package testenv

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresThrough returns a pool whose connections go to PostgreSQL through
// a Proxy, so that a test can cut them (Proxy.Cut, Proxy.Resume) without
// touching the server, and the pool's schema, a new one of its own like
// Postgres's. Connection attempts time out after 2 seconds.
func PostgresThrough(t testing.TB, maxConns int) (*pgxpool.Pool, *Proxy, string) {
	t.Helper()
	direct, schema := Postgres(t, 1) // creates and later drops the schema
	target := net.JoinHostPort(direct.Config().ConnConfig.Host, strconv.Itoa(int(direct.Config().ConnConfig.Port)))
	proxy := NewProxy(t, target)
	cfg, err := pgxpool.ParseConfig(PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if maxConns > 0 {
		cfg.MaxConns = int32(maxConns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ClosePool(t, pool) }) // runs before the schema is dropped
	return pool, proxy, schema
}
