// Package txboxkafka connects txbox to Apache Kafka through franz-go
// (github.com/twmb/franz-go): a Publisher for the relay and a Subscriber
// (consumer groups) for package consumer.
//
// The Publisher needs a *kgo.Client with franz-go's producer defaults, which
// are what txbox wants and which NewPublisher checks: acks=all and the
// idempotent producer. Each message becomes one record on topic
// Prefix+Topic with record key = message key (so messages of one key land
// on one partition and keep their order there; the idempotent producer
// keeps order across its in-flight requests), value = payload, the
// message's headers as record headers, Txbox-Created-At (the row's
// created_at), the CloudEvents attributes when PublisherConfig.CloudEventsSource
// is set, and the message id as the last header, Txbox-Message-Id (reserved
// headers are dropped, so none can override it); docs/reference/wire-format.md.
//
// Dedupe: the idempotent producer removes the duplicates that its own
// retries would create within one producer session. Kafka has no dedupe by
// message id: when the relay publishes a message again (a crash after the
// broker's ack and before the row is marked) the topic holds it twice, both
// with the same Txbox-Message-Id header, and the consumer's inbox drops the
// second.
//
// Transactions: a client made with kgo.TransactionalID makes NewPublisher
// return a transactional Publisher. Each Publish call is one transaction,
// committed before Publish returns, so the relay marks the rows after the
// commit and a read_committed consumer never sees the records of a batch a
// crash cut short (the next producer with the id aborts the open
// transaction). Choose one id per relay process slot, the same across its
// restarts: a producer that starts with an id fences the one that had it,
// whose errors then wrap ErrFenced and txbox.ErrPublisherClosed (or only
// the latter: see ErrFenced). A new client with the id takes it back, so
// a Publisher closed for good is not replaced by one with the same id
// while another relay may hold it. A crash
// after the commit and before the rows are marked still sends the batch
// again, in a new transaction, and the inbox drops the copies;
// docs/guide/brokers.md ("Kafka transactions") says exactly what is
// promised and where the window is.
//
// Errors: a record the cluster refuses for itself (too large, an unknown
// topic once the cluster has said so definitively, an invalid topic name,
// no authorization for the topic) is txbox.Reject; an unreachable cluster,
// timeouts and a cancelled context are transient.
//
// NewPublisher and NewSubscriber take a *kgo.Client the caller made;
// whoever created it closes it. A consumer group's member is the one
// client the package creates: franz-go fixes a client's group at creation,
// so each Subscribe derives one from the caller's client's options and the
// subscription's Close closes it (see NewSubscriber).
//
// The tests run against franz-go's in-process fake cluster
// (github.com/twmb/franz-go/pkg/kfake), as no Kafka server runs on the
// development machines; kfake speaks the Kafka protocol, including
// idempotent produce, transactions and consumer groups.
package txboxkafka
