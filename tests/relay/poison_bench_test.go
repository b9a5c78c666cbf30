package relay_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// BenchmarkDrainWithBadRows drains 30,000 good rows with a relay into a
// publisher that acknowledges everything, with and without one bad row of
// each kind in their middle (14, on a table without the contract's
// constraints, so that every kind reaches the relay), interleaved, and
// reports both rates and their ratio (1: the bad rows cost the good ones
// nothing).
//
//	CI=true go test -run '^$' -bench DrainWithBadRows -benchtime 1x ./tests/relay
func BenchmarkDrainWithBadRows(b *testing.B) {
	for range b.N {
		var clean, bad []float64
		for rep := range 7 {
			for _, poisoned := range []bool{rep%2 == 0, rep%2 != 0} {
				rate := drainRate(b, poisoned)
				if poisoned {
					bad = append(bad, rate)
				} else {
					clean = append(clean, rate)
				}
			}
		}
		mc, mb := median(clean), median(bad)
		b.ReportMetric(mc, "clean-msgs/s")
		b.ReportMetric(mb, "with-bad-rows-msgs/s")
		b.ReportMetric(mb/mc, "ratio")
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func drainRate(b *testing.B, poisoned bool) float64 {
	b.Helper()
	f := pgxFixture(b, 8)
	dropContract(b, f) // every kind reaches the relay
	prefix := testenv.Subject()
	const n = 30_000
	msgs := make([]txbox.Message, 0, 1000)
	for i := range n {
		msgs = append(msgs, txbox.Message{Topic: prefix + "good", Payload: []byte(fmt.Sprint(i))})
		if len(msgs) == cap(msgs) {
			testenv.Must(b, testenv.Err(f.outbox.AddNoTx(context.Background(), msgs...)), "add")
			msgs = msgs[:0]
			if poisoned && i == n/2-1 {
				for j, br := range badRows(prefix) {
					if br.dialect == "" {
						testenv.Must(b, insertRow(f, prefix, i*100+j, br.cols), "insert %s", br.name)
					}
				}
			}
		}
	}
	r, err := relay.New(txboxpgx.New(f.pool), txbox.Publisher(nopPublisher{}), relay.Config{BatchSize: 100})
	testenv.Must(b, err, "relay.New")
	ctx := context.Background()
	start := time.Now()
	for {
		k, err := r.Round(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if k == 0 {
			break
		}
	}
	return n / time.Since(start).Seconds()
}
