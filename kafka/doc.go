// Package kafka connects txbox to Apache Kafka through franz-go
// (github.com/twmb/franz-go): a Publisher for the relay, a consumer-group
// Subscriber (Fetch / Ack / Nack / Dead), and ConsumerSubscriber, the
// txbox.Subscriber for the consumer runtime.
//
// The Publisher needs a *kgo.Client with franz-go's producer defaults, which
// are what txbox wants and which NewPublisher checks: acks=all and the
// idempotent producer. Each message becomes one record on topic
// Prefix+Topic with record key = message key (so messages of one key land
// on one partition and keep their order there; the idempotent producer
// keeps order across its in-flight requests), value = payload, the
// message's headers as record headers, and the message id as the last
// header, Message-Id (reserved headers are dropped, so none can override
// it).
//
// Dedupe: the idempotent producer removes the duplicates that its own
// retries would create within one producer session. Kafka has no dedupe by
// message id: when the relay publishes a message again (a crash after the
// broker's ack and before the row is marked) the topic holds it twice, both
// with the same Message-Id header, and the consumer's inbox drops the
// second.
//
// Errors: a record the cluster refuses for itself (too large, an unknown
// topic once the cluster has said so definitively, an invalid topic name,
// no authorization for the topic) is txbox.Reject; an unreachable cluster,
// timeouts and a cancelled context are transient.
//
// The tests run against franz-go's in-process fake cluster
// (github.com/twmb/franz-go/pkg/kfake), as no Kafka server runs on the
// development machines; kfake speaks the Kafka protocol, including
// idempotent produce and consumer groups.
package kafka
