package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relayseam"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
)

// settledSampler takes a sample from inside Settled, which the relay calls
// once a batch's marks are committed: the window in which a sample's
// backlog already shows the batch delivered.
type settledSampler struct {
	txbox.RelayObserver
	mu      sync.Mutex
	r       *relay.Relay
	samples []txbox.RelaySample
}

func (o *settledSampler) Claimed(int, time.Duration)        {}
func (o *settledSampler) Published(int, int, time.Duration) {}
func (o *settledSampler) RoundFailed(string)                {}
func (o *settledSampler) Sampled(txbox.RelaySample)         {}
func (o *settledSampler) Settled(string, txbox.Outcome, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.r != nil {
		o.samples = append(o.samples, relayseam.Sample(context.Background(), o.r).(txbox.RelaySample))
	}
}

// A sample whose backlog shows a batch's marks does not count that batch
// as in flight (the metrics' oldest in-flight age drops to zero once the
// backlog is empty).
func TestSampleDoesNotCountAMarkedBatchInFlight(t *testing.T) {
	f := sqlFixture(t, "sqlite", testenv.SQLite(t), txboxdriver.SQLite)
	f.add(t, true, txbox.Message{Topic: "inflight.a", Payload: []byte("a")})
	obs := &settledSampler{}
	r := f.newRelay(t, &recordingPublisher{}, relay.Config{Observer: obs})
	obs.mu.Lock()
	obs.r = r
	obs.mu.Unlock()
	n, err := r.Round(context.Background())
	testenv.Must(t, err, "round")
	if n != 1 {
		t.Fatalf("round claimed %d rows, want 1", n)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.samples) != 1 {
		t.Fatalf("%d samples, want 1", len(obs.samples))
	}
	s := obs.samples[0]
	testenv.Must(t, s.Err, "sample")
	if s.Pending != 0 || s.OldestInFlightAge != 0 {
		t.Errorf("sample after the marks: pending %d, oldest in flight %s; want 0 and 0", s.Pending, s.OldestInFlightAge)
	}
}
