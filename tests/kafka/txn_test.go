package kafka_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
)

// txnSuite is suite with a transactional Publisher (a transactional id of
// its own per publisher) and a read_committed reader.
func txnSuite(t *testing.T) (brokertest.NewFunc, brokertest.Features) {
	c := cluster(t)
	f := brokertest.Features{
		PerKeyOrder: true, Headers: true,
		Reject: func(t *testing.T, topic string) txbox.Message {
			return txbox.Message{ID: "rejected-" + topic, Topic: topic, Payload: make([]byte, 2<<20)}
		},
	}
	return func(t *testing.T) (txbox.Publisher, brokertest.Reader) {
		prefix := testenv.Name("t") + "."
		p, err := txboxkafka.NewPublisher(newClient(t, c, kgo.TransactionalID(testenv.Name("txn"))), txboxkafka.PublisherConfig{Prefix: prefix})
		testenv.Must(t, err, "publisher")
		if p.TransactionalID() == "" {
			t.Fatal("a client with a transactional id made a Publisher without transactions")
		}
		return p, reader{c: c, prefix: prefix, committed: true}
	}, f
}

func TestTransactionalConformance(t *testing.T) {
	t.Parallel()
	newPub, f := txnSuite(t)
	brokertest.TestPublisher(t, newPub, f)
}

func TestTransactionalRelay(t *testing.T) {
	t.Parallel()
	newPub, f := txnSuite(t)
	brokertest.TestRelay(t, testenv.PgxDriver(t, 8), newPub, f)
}

// A message the cluster refuses aborts its transaction; the others of
// the Publish call are committed in a new one, and a read_committed
// consumer sees each of them once.
func TestTransactionalRejectCommitsTheRest(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	prefix := testenv.Name("t") + "."
	p, err := txboxkafka.NewPublisher(newClient(t, c, kgo.TransactionalID(testenv.Name("txn"))), txboxkafka.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msgs := []txbox.Message{
		{ID: "a", Topic: "orders", Key: "k", Payload: []byte("a")},
		{ID: "big", Topic: "orders", Key: "k", Payload: make([]byte, 2<<20)},
		{ID: "b", Topic: "orders", Key: "k2", Payload: []byte("b")},
	}
	errs := p.Publish(ctx, msgs)
	if len(errs) != 3 || errs[0] != nil || !txbox.IsRejected(errs[1]) || errs[2] != nil {
		t.Fatalf("errors %v, want [nil, rejected, nil]", errs)
	}
	if errs := p.Publish(ctx, []txbox.Message{{ID: "c", Topic: "orders", Key: "k", Payload: []byte("c")}}); errs != nil {
		t.Fatalf("publish c: %v", errs)
	}
	ds, err := reader{c: c, prefix: prefix, committed: true}.Read(ctx, "orders", 3)
	testenv.Must(t, err, "read")
	seen := map[string]int{}
	for _, d := range ds {
		seen[d.ID]++
	}
	if len(ds) != 3 || seen["a"] != 1 || seen["b"] != 1 || seen["c"] != 1 {
		t.Fatalf("read_committed saw %v, want a, b and c once each", seen)
	}
}

// Two producers with the same transactional id: the younger one's start
// fences the older, whose commit then fails with txboxkafka.ErrFenced (and
// txbox.ErrPublisherClosed, which stops a relay) while its transaction is
// open, and which can never publish again; a read_committed consumer sees
// nothing of the fenced transaction.
func TestTransactionalFencing(t *testing.T) {
	t.Parallel()
	c := cluster(t, kfake.DefaultNumPartitions(1))
	prefix := testenv.Name("t") + "."
	id := testenv.Name("relay")
	p1, err := txboxkafka.NewPublisher(newClient(t, c, kgo.TransactionalID(id)), txboxkafka.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher 1")
	p2, err := txboxkafka.NewPublisher(newClient(t, c, kgo.TransactionalID(id)), txboxkafka.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher 2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msg := func(id string) []txbox.Message {
		return []txbox.Message{{ID: id, Topic: "orders", Key: "k", Payload: []byte(id)}}
	}
	if errs := p1.Publish(ctx, msg("old-1")); errs != nil {
		t.Fatalf("old producer's first publish: %v", errs)
	}

	// The old producer's next commit is held at the broker until the new
	// producer, with the same id, has started and committed.
	var held atomic.Bool
	var p2errs []error
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !held.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		c.SleepControl(func() { p2errs = p2.Publish(ctx, msg("new-1")) })
		return nil, nil, false
	})
	errs := p1.Publish(ctx, msg("old-2"))
	if !held.Load() {
		t.Fatal("the old producer's commit never reached the broker")
	}
	if p2errs != nil {
		t.Fatalf("new producer: %v", p2errs)
	}
	if len(errs) != 1 || !errors.Is(errs[0], txboxkafka.ErrFenced) || !errors.Is(errs[0], txbox.ErrPublisherClosed) {
		t.Fatalf("old producer's commit after the new one started: %v, want ErrFenced and ErrPublisherClosed", errs)
	}
	if errs := p1.Publish(ctx, msg("old-3")); len(errs) != 1 || !errors.Is(errs[0], txboxkafka.ErrFenced) {
		t.Fatalf("old producer after it was fenced: %v, want ErrFenced", errs)
	}
	if errs := p2.Publish(ctx, msg("new-2")); errs != nil {
		t.Fatalf("new producer: %v", errs)
	}
	ds, err := reader{c: c, prefix: prefix, committed: true}.Read(ctx, "orders", 3)
	testenv.Must(t, err, "read")
	var got []string
	for _, d := range ds {
		got = append(got, d.ID)
	}
	if len(got) != 3 || got[0] != "old-1" || got[1] != "new-1" || got[2] != "new-2" {
		t.Fatalf("read_committed: %q, want old-1 new-1 new-2", got)
	}
}

// A Subscriber refuses a transactional client: its group member produces
// retry and dead-letter copies outside any transaction.
func TestSubscriberRefusesTransactionalClient(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	if _, err := txboxkafka.NewSubscriber(newClient(t, c, kgo.TransactionalID(testenv.Name("txn"))), txboxkafka.SubscriberConfig{}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("transactional client: %v, want ErrInvalidConfig", err)
	}
}

// A commit the cluster fails leaves the messages unacknowledged
// (transient errors), the transaction aborted; published again, a
// read_committed consumer sees each of them once.
func TestTransactionalFailedCommitIsAborted(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	prefix := testenv.Name("t") + "."
	p, err := txboxkafka.NewPublisher(newClient(t, c, kgo.TransactionalID(testenv.Name("txn"))), txboxkafka.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msgs := []txbox.Message{
		{ID: "a", Topic: "orders", Key: "k", Payload: []byte("a")},
		{ID: "b", Topic: "orders", Key: "k2", Payload: []byte("b")},
	}
	f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TopLevel: true, Err: kerr.UnknownServerError})
	errs := p.Publish(ctx, msgs)
	if len(errs) != 2 || errs[0] == nil || errs[1] == nil || txbox.IsRejected(errs[0]) || errors.Is(errs[0], txbox.ErrPublisherClosed) {
		t.Fatalf("failed commit: %v, want two transient errors", errs)
	}
	if f.Hits() == 0 {
		t.Fatal("the fault never hit a commit")
	}
	if errs := p.Publish(ctx, msgs); errs != nil {
		t.Fatalf("published again: %v", errs)
	}
	ds, err := reader{c: c, prefix: prefix, committed: true}.Read(ctx, "orders", 2)
	testenv.Must(t, err, "read")
	seen := map[string]int{}
	for _, d := range ds {
		seen[d.ID]++
	}
	if len(ds) != 2 || seen["a"] != 1 || seen["b"] != 1 {
		t.Fatalf("read_committed saw %v, want a and b once each", seen)
	}
}

// A Publish whose context ends while its commit is on its way (the
// publish timeout, which counts the wait for the publisher's turn) still
// learns the commit's outcome: the commit is not cut short by it. Cut
// short, the commit would land while Publish reported the messages as
// failed, and the relay would send them again: duplicates from every
// publish timeout, not only from a lost connection.
func TestTransactionalCommitOutlivesContext(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	prefix := testenv.Name("t") + "."
	p, err := txboxkafka.NewPublisher(newClient(t, c, kgo.TransactionalID(testenv.Name("txn"))), txboxkafka.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var held atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if held.CompareAndSwap(false, true) {
			// The commit reached the cluster: the publish's context ends
			// before the answer leaves.
			cancel()
			c.SleepControl(func() { time.Sleep(500 * time.Millisecond) })
		}
		return nil, nil, false
	})
	msgs := []txbox.Message{
		{ID: "a", Topic: "orders", Key: "k", Payload: []byte("a")},
		{ID: "b", Topic: "orders", Key: "k2", Payload: []byte("b")},
	}
	errs := p.Publish(ctx, msgs)
	if !held.Load() {
		t.Fatal("no commit reached the cluster")
	}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	ds, err := reader{c: c, prefix: prefix, committed: true}.Read(rctx, "orders", 2)
	testenv.Must(t, err, "read")
	if errs != nil {
		t.Fatalf("Publish: %v, although its transaction committed (read_committed saw %d messages): the relay would send them again", errs, len(ds))
	}
	if len(ds) != 2 {
		t.Fatalf("read_committed saw %d messages, want 2", len(ds))
	}
}
