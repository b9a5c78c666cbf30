package txbox

import (
	"context"
	"time"
)

// DeadlineExtender is a Delivery whose broker redelivers it when it stays
// unsettled for a while (JetStream's AckWait; on Redis Streams the idle
// time after which another consumer of the group may claim it). The
// consumer, while a delivery is unsettled, calls ExtendDeadline a few
// times per AckDeadline, so that a handler running longer than the
// deadline is not redelivered under it. A Delivery without the method has
// no such deadline, or none that can be extended (RabbitMQ's
// consumer_timeout, Kafka).
type DeadlineExtender interface {
	// AckDeadline is how long the broker waits for the settlement before
	// it redelivers; <= 0: no deadline.
	AckDeadline() time.Duration
	// ExtendDeadline restarts that wait (JetStream: InProgress). It fails
	// when the delivery is no longer this consumer's.
	ExtendDeadline(ctx context.Context) error
}

// Horizon is how long after its publication a message of a binding may
// still reach a consumer (again): a redelivery, a replay from the broker's
// retention, a re-publish the broker no longer deduplicates. An inbox must
// keep its receipts longer than that.
type Horizon struct {
	// Age is the horizon; 0 means it is unbounded or unknown (Detail says
	// which).
	Age time.Duration
	// Detail says where Age comes from ("stream ORDERS: MaxAge 72h0m0s"),
	// or why it is not known.
	Detail string
}

// HorizonReporter is a Subscriber that can read a binding's Horizon from
// the broker (JetStream: the stream's MaxAge and duplicate window; Kafka:
// the topic's retention.ms). The consumer compares it with the inbox
// retention at startup.
type HorizonReporter interface {
	Horizon(ctx context.Context, binding string) (Horizon, error)
}

// UnroutedObserver is a ConsumerObserver that also counts the deliveries
// of a binding that no route claimed (see consumer.Route), by binding and
// by what was done with them: dead-lettered or acked.
type UnroutedObserver interface {
	Unrouted(binding string, deadLettered bool)
}
