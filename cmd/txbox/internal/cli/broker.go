package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsembed"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/txboxasynq"
	"github.com/txbox/txbox/txboxkafka"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// Defaults of the broker flags.
const (
	DefaultNATSDir    = "./txbox-nats"
	DefaultNATSListen = "127.0.0.1:4222"
	DefaultStream     = "TXBOX"
	// DefaultSubjectPrefix is put before topics on the embedded server when
	// no stream is named: topic order.placed → subject txbox.order.placed,
	// captured by the stream TXBOX.
	DefaultSubjectPrefix = "txbox."
)

// brokerFlags choose the broker: a NATS URL, or the embedded server.
type brokerFlags struct {
	url            string
	natsDir        string
	natsListen     string
	stream         string
	streamSubjects string
	subjectPrefix  string
	amqp           amqpFlags
	ceSource       string // --cloudevents-source
	kafkaTxnID     string // --kafka-transactional-id

	fs *pflag.FlagSet // to name a value's flag or variable; nil in tests
	// events, when set, logs the NATS connection's disconnects, reconnects
	// and close.
	events *slog.Logger
	// maxControlLine is the NATS server's max control line as the last
	// publisher learned it (natsjs.Publisher.MaxControlLine), carried to
	// the publisher of the next connection; 0 is the default.
	maxControlLine int
}

// unreachableError marks a failure to reach the broker that trying again
// may cure (connection refused, timeouts, JetStream not ready yet), as
// against a wrong setting (a stream that does not exist, bad credentials).
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// isUnreachable reports whether err is an unreachableError: worth a retry.
func isUnreachable(err error) bool {
	var u *unreachableError
	return errors.As(err, &u)
}

func (f *brokerFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	f.fs = fs
	fs.StringVar(&f.url, "broker", envOr(EnvBroker, ""),
		"broker URL: nats://host:4222 (a comma-separated list of servers is allowed); empty starts an embedded NATS server with JetStream (env "+EnvBroker+")")
	fs.StringVar(&f.natsDir, "nats-dir", DefaultNATSDir,
		"embedded NATS server only: directory of its JetStream storage (messages survive restarts)")
	fs.StringVar(&f.natsListen, "nats-listen", DefaultNATSListen,
		"embedded NATS server only: host:port to listen on (port 0 picks a free one)")
	fs.StringVar(&f.stream, "stream", envOr(EnvStream, ""),
		"JetStream stream to use: created with --stream-subjects if missing, else it must exist (default "+DefaultStream+" when --stream-subjects is given) (env "+EnvStream+")")
	fs.StringVar(&f.streamSubjects, "stream-subjects", envOr(EnvStreamSubjects, ""),
		`comma-separated subjects the stream captures, e.g. "orders.>,billing.>": the stream is created with them if missing (an existing one is used as it is, with a warning if it does not capture them); with the embedded server and neither --stream nor this, stream `+DefaultStream+` captures `+DefaultSubjectPrefix+`> (env `+EnvStreamSubjects+")")
	fs.StringVar(&f.subjectPrefix, "subject-prefix", envOr(EnvSubjectPrefix, ""),
		"prefix put before every topic to form the NATS subject, the RabbitMQ routing key, the Redis stream or the Kafka topic (env "+EnvSubjectPrefix+")")
	f.amqp.register(fs)
	registerCloudEvents(fs, &f.ceSource)
	fs.StringVar(&f.kafkaTxnID, "kafka-transactional-id", envOr(EnvKafkaTransactionalID, ""),
		"Kafka only: publish each batch in one Kafka transaction under this transactional id, committed before the rows are marked; one id per relay process slot, the same across its restarts (a relay started with the id fences the one that had it); empty uses the idempotent producer without transactions (env "+EnvKafkaTransactionalID+")")
}

// mode says how the relay publishes, for the dashboard's relay panel:
// Kafka's producer (transactional, with its id, or idempotent); "" for
// the other brokers.
func (f *brokerFlags) mode() string {
	if f.url == "" {
		return ""
	}
	if scheme, err := checkBrokerURL("--broker", f.url); err != nil || scheme != "kafka" {
		return ""
	}
	if f.kafkaTxnID != "" {
		return "Kafka, transactional id " + f.kafkaTxnID
	}
	return "Kafka, idempotent producer (no transactions)"
}

// EnvKafkaTransactionalID is the default of --kafka-transactional-id.
const EnvKafkaTransactionalID = "TXBOX_KAFKA_TRANSACTIONAL_ID"

// check validates the flags without touching anything.
func (f *brokerFlags) check() error {
	scheme := "nats"
	if f.url != "" {
		var err error
		if scheme, err = checkBrokerURL(sourceOf(f.fs, "broker", EnvBroker), f.url); err != nil {
			return err
		}
		for _, name := range []string{"nats-dir", "nats-listen"} {
			if f.fs != nil && f.fs.Changed(name) {
				return fmt.Errorf("--%s is for the embedded NATS server, not --broker %s", name, redact(f.url, f.url))
			}
		}
	}
	kind := scheme
	if f.url == "" {
		kind = ""
	}
	if err := f.amqp.check(f.fs, kind); err != nil {
		return err
	}
	if err := checkCloudEvents(f.fs, kind, f.ceSource); err != nil {
		return err
	}
	if scheme != "nats" && scheme != "tls" {
		for _, v := range []struct{ flag, env, val string }{
			{"stream", EnvStream, f.stream}, {"stream-subjects", EnvStreamSubjects, f.streamSubjects},
		} {
			if v.val != "" {
				return fmt.Errorf("%s is for NATS JetStream, not %s://", sourceOf(f.fs, v.flag, v.env), scheme)
			}
		}
	}
	if f.kafkaTxnID != "" {
		name := sourceOf(f.fs, "kafka-transactional-id", EnvKafkaTransactionalID)
		switch {
		case f.url == "":
			return fmt.Errorf("%s is for Kafka (--broker kafka://…), not the embedded NATS server", name)
		case scheme != "kafka":
			return fmt.Errorf("%s is for Kafka (--broker kafka://…), not %s://", name, scheme)
		}
		if err := txboxkafka.CheckTransactionalID(f.kafkaTxnID); err != nil {
			return fmt.Errorf("%s %w", name, err)
		}
	}
	prefix := sourceOf(f.fs, "subject-prefix", EnvSubjectPrefix)
	var err error
	switch scheme {
	case "kafka":
		err = txboxkafka.CheckPrefix(f.subjectPrefix)
	case "amqp", "amqps":
		err = txboxrabbitmq.CheckPrefix(f.subjectPrefix)
	case "redis", "rediss":
		err = redisstream.CheckPrefix(f.subjectPrefix)
	case "asynq+redis", "asynq+rediss":
		if f.subjectPrefix != "" {
			return fmt.Errorf("%s %q: asynq task types are the topics, with no prefix", prefix, f.subjectPrefix)
		}
	default:
		err = natsjs.CheckPrefix(f.subjectPrefix)
	}
	if err != nil {
		return fmt.Errorf("%s %w", prefix, err)
	}
	if f.url == "" {
		if f.stream == "" && f.streamSubjects == "" {
			// Zero-setup default: nats-server refuses a stream capturing
			// every subject, so topics get a prefix that one stream captures.
			if f.subjectPrefix == "" {
				f.subjectPrefix = DefaultSubjectPrefix
			}
			f.stream, f.streamSubjects = DefaultStream, f.subjectPrefix+">"
		}
		if _, _, err := splitHostPort(f.natsListen); err != nil {
			return err
		}
	}
	if f.stream != "" {
		if err := natsjs.CheckStreamName(f.stream); err != nil {
			return fmt.Errorf("%s %w", sourceOf(f.fs, "stream", EnvStream), err)
		}
	}
	for _, subj := range splitList(f.streamSubjects) {
		if err := natsjs.CheckSubject(subj); err != nil {
			return fmt.Errorf("%s: subject %w", sourceOf(f.fs, "stream-subjects", EnvStreamSubjects), err)
		}
	}
	return nil
}

// checkBrokerURL checks raw, the broker URL from name (--broker or
// TXBOX_BROKER), with the ParseURL of the adapter its scheme names, and
// returns its scheme.
func checkBrokerURL(name, raw string) (string, error) {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return "", fmt.Errorf("%s %q: want a URL such as nats://127.0.0.1:4222", name, redact(raw, raw))
	}
	var err error
	switch scheme {
	case "nats", "tls":
		_, err = natsjs.ParseURL(raw)
	case "amqp", "amqps":
		_, err = txboxrabbitmq.ParseURL(raw)
	case "redis", "rediss":
		_, _, err = redisstream.ParseURL(raw)
	case "asynq+redis", "asynq+rediss":
		_, _, err = txboxasynq.ParseURL(raw)
	case "kafka":
		_, err = txboxkafka.ParseURL(raw)
	default:
		return "", fmt.Errorf("%s %q: unsupported broker (want nats://host:port, amqp://user:pass@host:5672/vhost, redis://host:6379/0, asynq+redis://host:6379/0 or kafka://host:9092)", name, redact(raw, raw))
	}
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", name, redact(raw, raw), redactErr(err, raw))
	}
	return scheme, nil
}

// isPrintable reports whether cell leaves s as it is.
func isPrintable(s string) bool { return cell(s) == s }

func splitHostPort(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("--nats-listen %q: %w (want host:port)", hp, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("--nats-listen %q: bad port (want 0 to 65535)", hp)
	}
	return host, port, nil
}

// broker is the publisher of --broker, or of the embedded NATS server.
type broker struct {
	pub   txbox.Publisher
	close func() error      // the publisher's Close
	srv   *natsembed.Server // the embedded server; nil for a remote one
	desc  string
	// nc is the NATS connection, closed is closed when it is closed for
	// good; nil for the other brokers.
	nc     *nats.Conn
	closed chan struct{}
	// natsPub is the NATS publisher, whose learned MaxControlLine outlives
	// the connection (see reconnecting).
	natsPub *natsjs.Publisher
}

// publisherAttrs are the publisher's settings in the relay's startup line:
// for Kafka, whether the producer is transactional, and its transactional id.
func publisherAttrs(pub txbox.Publisher) []any {
	kp, ok := pub.(*txboxkafka.Publisher)
	switch {
	case !ok:
		return nil
	case kp.TransactionalID() != "":
		return []any{"kafka_producer", "transactional", "kafka_transactional_id", kp.TransactionalID()}
	default:
		return []any{"kafka_producer", "idempotent"}
	}
}

// openBroker connects to the broker (starting the embedded server if asked)
// and builds its publisher with the adapter's FromURL; on NATS, it ensures
// the stream. Progress lines go to out. A failure that trying again may
// cure is an unreachableError.
func openBroker(ctx context.Context, f *brokerFlags, out io.Writer) (*broker, error) {
	b := &broker{}
	url := f.url
	if url == "" {
		host, port, err := splitHostPort(f.natsListen)
		if err != nil {
			return nil, err
		}
		srv, err := natsembed.Start(natsembed.Config{Dir: f.natsDir, Host: host, Port: port})
		var listen *net.OpError
		if errors.As(err, &listen) && listen.Op == "listen" {
			return nil, fmt.Errorf("embedded NATS server: %w (if a NATS server already runs there, use it with --broker nats://%s; or choose another --nats-listen)", err, f.natsListen)
		}
		if err != nil {
			return nil, err
		}
		b.srv = srv
		url = srv.ClientURL()
		b.desc = "embedded " + url
		fmt.Fprintf(out, "embedded NATS server listening on %s (JetStream data in %s)\n", url, f.natsDir)
	} else {
		b.desc = redact(url, url)
	}
	scheme, _, _ := strings.Cut(url, "://")
	permanent := func(error) bool { return false }
	var err error
	switch scheme {
	case "amqp", "amqps":
		permanent = txboxrabbitmq.IsPermanentConnectError
		err = b.openRabbitMQ(ctx, f, out)
	case "kafka":
		err = b.openKafka(ctx, f, out)
	case "redis", "rediss", "asynq+redis", "asynq+rediss":
		err = b.openRedis(ctx, f, out)
	default:
		permanent = natsjs.IsPermanentConnectError
		err = b.openNATS(ctx, f, url, out)
	}
	if err != nil {
		b.Close()
		if !errors.Is(err, txbox.ErrInvalidConfig) && !permanent(err) {
			err = &unreachableError{err}
		}
		return nil, redactErr(err, url)
	}
	return b, nil
}

// openNATS connects to the NATS server at url, logging the connection's
// events to f.events, and ensures the stream.
func (b *broker) openNATS(ctx context.Context, f *brokerFlags, url string, out io.Writer) error {
	b.closed = make(chan struct{})
	closed, desc := b.closed, b.desc
	opts := []nats.Option{nats.ClosedHandler(func(nc *nats.Conn) {
		close(closed)
		if err := nc.LastError(); err != nil && f.events != nil {
			f.events.Warn("NATS connection closed", "broker", desc, "err", redactErr(err, url))
		}
	})}
	if log := f.events; log != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
				if err == nil || nc.IsClosed() {
					return // closed by us, or logged as closed below
				}
				log.Warn("NATS connection lost; reconnecting", "broker", desc, "err", redactErr(err, url))
			}),
			nats.ReconnectHandler(func(*nats.Conn) { log.Info("NATS connection back", "broker", desc) }),
			// nats.go writes asynchronous errors (a slow consumer, a
			// permissions violation) to stderr unless given a handler.
			nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
				args := []any{"broker", desc, "err", redactErr(err, url)}
				if sub != nil {
					args = append(args, "subject", sub.Subject)
				}
				log.Warn("NATS asynchronous error", args...)
			}))
	}
	p, err := natsjs.FromURL(ctx, url, natsjs.PublisherConfig{Prefix: f.subjectPrefix, Logger: f.events,
		CloudEventsSource: f.ceSource, MaxControlLine: f.maxControlLine}, opts...)
	if err != nil {
		return err
	}
	b.pub, b.close, b.nc, b.natsPub = p, p.Close, p.Conn(), p
	return ensureStream(ctx, b.nc, f, out)
}

func ensureStream(ctx context.Context, nc *nats.Conn, f *brokerFlags, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	subjects := splitList(f.streamSubjects)
	name := f.stream
	switch {
	case len(subjects) > 0:
		if name == "" {
			name = DefaultStream
		}
		s, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: name, Subjects: subjects})
		if err != nil {
			return err
		}
		have := s.CachedInfo().Config.Subjects
		fmt.Fprintf(out, "stream %s captures %s\n", cell(name), cell(strings.Join(have, ", ")))
		if missing := natsjs.Uncaptured(subjects, have); len(missing) > 0 {
			msg := fmt.Sprintf("stream %s already exists and does not capture %s of --stream-subjects: messages to such subjects are rejected by the broker and retried until dead; add them to the stream (nats stream edit %s --subjects …) or name another --stream",
				cell(name), cell(strings.Join(missing, ", ")), cell(name))
			if f.events != nil {
				f.events.Warn(msg)
			} else {
				fmt.Fprintln(out, "warning: "+msg)
			}
		}
	case name != "":
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("stream %s: %w (give --stream-subjects to create it)", name, err)
		}
		fmt.Fprintf(out, "stream %s captures %s\n", cell(name), cell(strings.Join(s.CachedInfo().Config.Subjects, ", ")))
	}
	return nil
}

// Close closes the publisher and its connection and stops the embedded
// server.
func (b *broker) Close() {
	if b.close != nil {
		_ = b.close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
	}
}

// openKafka builds the Kafka publisher: --subject-prefix is put before
// topics to name Kafka topics; --kafka-transactional-id makes it
// transactional.
func (b *broker) openKafka(ctx context.Context, f *brokerFlags, out io.Writer) error {
	var opts []kgo.Opt
	if f.kafkaTxnID != "" {
		opts = append(opts, kgo.TransactionalID(f.kafkaTxnID))
	}
	p, err := txboxkafka.FromURL(ctx, f.url, txboxkafka.PublisherConfig{Prefix: f.subjectPrefix, CloudEventsSource: f.ceSource}, opts...)
	if err != nil {
		return err
	}
	b.pub, b.close = p, p.Close
	if f.kafkaTxnID != "" {
		fmt.Fprintf(out, "Kafka at %s: topics are %s<topic>; one transaction per batch, transactional id %s\n", b.desc, f.subjectPrefix, cell(f.kafkaTxnID))
	} else {
		fmt.Fprintf(out, "Kafka at %s: topics are %s<topic>\n", b.desc, f.subjectPrefix)
	}
	return nil
}

// openRedis builds the Redis Streams publisher (--subject-prefix names
// the streams; the URL's maxlen=N trims them) or, for asynq+redis://, the
// asynq one (the URL's queue=NAME, TXBOX_TASK_RETENTION).
func (b *broker) openRedis(ctx context.Context, f *brokerFlags, out io.Writer) error {
	if f.events != nil {
		redis.SetLogger(redisstream.Logger(f.events)) // go-redis logs to stderr by itself
	}
	if strings.HasPrefix(f.url, "asynq+") {
		retention, err := taskRetentionFromEnv()
		if err != nil {
			return err
		}
		p, err := txboxasynq.FromURL(ctx, f.url, txboxasynq.PublisherConfig{Retention: retention})
		if err != nil {
			return err
		}
		b.pub, b.close = p, p.Close
		fmt.Fprintf(out, "asynq on Redis at %s: tasks of type <topic> go to queue %s\n", b.desc, cell(p.Queue()))
		return nil
	}
	p, err := redisstream.FromURL(ctx, f.url, redisstream.PublisherConfig{Prefix: f.subjectPrefix})
	if err != nil {
		return err
	}
	b.pub, b.close = p, p.Close
	fmt.Fprintf(out, "Redis Streams at %s: streams are %s<topic>\n", b.desc, f.subjectPrefix)
	return nil
}
