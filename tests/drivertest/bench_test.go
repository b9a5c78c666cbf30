package drivertest_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// BenchmarkDrain measures how fast one relay (default concurrency, batch
// 500) drains a filled outbox into a publisher that acknowledges at once:
// the database side of the relay, per driver. Run with
//
//	go test ./drivertest -run '^$' -bench Drain -benchtime 20000x
func BenchmarkDrain(b *testing.B) {
	b.Run("pgx", func(b *testing.B) {
		pool, _ := testenv.Postgres(b, 8)
		benchDrain(b, txboxpgx.New(pool))
	})
	b.Run("sql_postgres", func(b *testing.B) {
		db, _ := testenv.PostgresDB(b, 8)
		benchDrain[*sql.Tx](b, txboxsql.New(db, txboxdriver.Postgres))
	})
	b.Run("sqlite", func(b *testing.B) { benchDrain[*sql.Tx](b, txboxsql.New(testenv.SQLite(b), txboxdriver.SQLite)) })
	b.Run("mysql", func(b *testing.B) { benchDrain[*sql.Tx](b, txboxsql.New(testenv.MySQL(b), txboxdriver.MySQL)) })
}

func benchDrain[TTx any](b *testing.B, drv txboxdriver.Driver[TTx]) {
	ctx := context.Background()
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(b, err, "migrate")
	_, err = m.Up(ctx)
	testenv.Must(b, err, "up")
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(b, err, "outbox")
	n := b.N
	for i := 0; i < n; i += 1000 {
		var msgs []txbox.Message
		for j := i; j < min(n, i+1000); j++ {
			key := ""
			if j%2 == 0 {
				key = fmt.Sprint("k", j%1000)
			}
			msgs = append(msgs, txbox.Message{Topic: "t", Key: key, Payload: make([]byte, 200)})
		}
		testenv.Must(b, testenv.Err(ob.AddNoTx(ctx, msgs...)), "fill")
	}
	pub := &drivertest.Recorder{}
	r, err := relay.New(drv, pub, relay.Config{BatchSize: 500, PollInterval: time.Millisecond, DisableNotify: true})
	testenv.Must(b, err, "relay")
	b.ResetTimer()
	start := time.Now()
	testenv.Must(b, r.Start(ctx), "start")
	for len(pub.Published()) < n {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	b.StopTimer()
	testenv.Must(b, r.Stop(ctx), "stop")
	b.ReportMetric(float64(n)/el.Seconds(), "msgs/s")
}
