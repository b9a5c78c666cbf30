package relay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// BenchmarkRelayDrainJetStream drains b.N queued rows (one op is one
// relayed message) from PostgreSQL into JetStream with one relay running
// Round after Round, at batch 100 and 1000: -benchmem's allocs/op is the
// relay process's allocations per relayed message, pgx and nats.go
// included, and the CPU profile of it is the relay's cost per message.
// Half of the rows carry two headers, so that header decoding is in the
// measurement.
//
//	CI=true go test -run '^$' -bench RelayDrainJetStream -benchmem -benchtime 20000x ./tests/relay
func BenchmarkRelayDrainJetStream(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			f := pgxFixture(b, 4)
			nc := testenv.NATS(b)
			prefix := testenv.Subject()
			ctx := context.Background()
			js, err := jetstream.New(nc)
			testenv.Must(b, err, "jetstream")
			s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: testenv.Name("TXBOX"), Subjects: []string{prefix + ">"}})
			testenv.Must(b, err, "create stream")
			b.Cleanup(func() { _ = js.DeleteStream(context.Background(), s.CachedInfo().Config.Name) })
			payload := []byte(`{"order_id":123456,"customer":"c-42","items":[{"sku":"tea","qty":2}],"total_cents":1999,"currency":"EUR"}`)
			hdrs := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}
			msgs := make([]txbox.Message, 0, 1000)
			for i := range b.N {
				m := txbox.Message{Topic: prefix + "orders", Payload: payload}
				if i%2 == 0 {
					m.Headers = hdrs
				}
				msgs = append(msgs, m)
				if len(msgs) == cap(msgs) || i == b.N-1 {
					testenv.Must(b, testenv.Err(f.outbox.AddNoTx(ctx, msgs...)), "add")
					msgs = msgs[:0]
				}
			}
			_, err = f.pool.Exec(ctx, "ANALYZE txbox_outbox")
			testenv.Must(b, err, "analyze")
			pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
			testenv.Must(b, err, "publisher")
			r, err := relay.New(txboxpgx.New(f.pool), pub, relay.Config{BatchSize: batch})
			testenv.Must(b, err, "relay.New")
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				n, err := r.Round(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					b.Fatalf("drained %d of %d rows", done, b.N)
				}
				done += n
			}
			b.StopTimer()
			if got := testenv.RelayStats(r).Published; got != int64(b.N) {
				b.Fatalf("published %d of %d", got, b.N)
			}
			info, err := s.Info(ctx)
			testenv.Must(b, err, "stream info")
			if info.State.Msgs != uint64(b.N) {
				b.Fatalf("stream holds %d messages, want %d", info.State.Msgs, b.N)
			}
		})
	}
}
