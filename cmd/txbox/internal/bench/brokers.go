package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relayseam"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxasynq"
	"github.com/txbox/txbox/txboxkafka"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// BrokersConfig says where the broker benchmark runs.
type BrokersConfig struct {
	Config // Pool, NATS (nil skips NATS), Out, Rows, Reps

	// Redis is the server for the Redis Streams and asynq runs; nil skips
	// them. Keys are unique to the run and deleted after each measurement.
	Redis *redis.Client
	// RabbitMQURL is the broker for the RabbitMQ runs (a durable classic
	// queue, publisher confirms); empty skips them.
	RabbitMQURL string
	// KafkaSeeds are the brokers of a Kafka cluster with topic
	// auto-creation; empty skips Kafka. (The benchmark's test runs it on
	// franz-go's in-process fake cluster, kfake, which is not linked into
	// the txbox binary.)
	KafkaSeeds []string
	// KafkaName names the Kafka target in the output. Default: "Kafka".
	KafkaName string
}

var benchPayload = []byte(`{"order_id":123456,"customer":"c-42","items":[{"sku":"tea","qty":2}],"total_cents":1999,"currency":"EUR"}`)

// Brokers measures, per broker, the relay's drain rate of queued
// PostgreSQL rows beside the raw publish rate of the same broker from Go,
// interleaved in one run, and prints the ratios. Default Rows here: 50,000.
func Brokers(ctx context.Context, cfg BrokersConfig) error {
	if cfg.Rows == 0 {
		cfg.Rows = 50_000
	}
	cfg.defaults()
	drv, ob, err := migrated(ctx, cfg.Pool)
	if err != nil {
		return err
	}
	id := strconv.FormatInt(time.Now().UnixNano(), 36)

	type target struct {
		name  string
		raw   func(n int) (float64, error)
		pub   txbox.Publisher
		topic string
		clean func() error
	}
	var targets []target
	if cfg.NATS != nil {
		js, err := natsjsStream(ctx, cfg, id)
		if err != nil {
			return err
		}
		defer func() { _ = js.done() }()
		pub, err := natsjs.NewPublisher(cfg.NATS, natsjs.PublisherConfig{})
		if err != nil {
			return err
		}
		targets = append(targets, target{"NATS JetStream", func(n int) (float64, error) { return rawPublish(ctx, cfg.NATS, js.subject, n, 4000, false) }, pub, js.subject, js.purge})
	}
	if cfg.Redis != nil {
		stream := "txboxbench:" + id
		pub, err := redisstream.NewPublisher(cfg.Redis, redisstream.PublisherConfig{})
		if err != nil {
			return err
		}
		del := func() error { return cfg.Redis.Del(ctx, stream).Err() }
		defer func() { _ = del() }()
		targets = append(targets, target{"Redis Streams", func(n int) (float64, error) { return rawXAdd(ctx, cfg.Redis, stream, n) }, pub, stream, del})

		queue := "txboxbench_" + id
		apub, err := txboxasynq.NewPublisher(cfg.Redis, txboxasynq.PublisherConfig{Queue: queue})
		if err != nil {
			return err
		}
		adel := func() error { return deleteKeys(ctx, cfg.Redis, "asynq:{"+queue+"}*") }
		defer func() { _ = adel(); cfg.Redis.SRem(context.WithoutCancel(ctx), "asynq:queues", queue) }()
		targets = append(targets, target{"asynq tasks", func(n int) (float64, error) { return rawAsynq(ctx, cfg.Redis, queue, n) }, apub, "order.placed", adel})
	}
	if cfg.RabbitMQURL != "" {
		conn, err := amqp.Dial(cfg.RabbitMQURL)
		if err != nil {
			return fmt.Errorf("rabbitmq: %w", err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitmq: %w", err)
		}
		queue := "txboxbench_" + id
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			return fmt.Errorf("rabbitmq: declare %s: %w", queue, err)
		}
		defer func() { _, _ = ch.QueueDelete(queue, false, false, false) }()
		pub, err := txboxrabbitmq.FromURL(ctx, cfg.RabbitMQURL, txboxrabbitmq.PublisherConfig{}, txboxrabbitmq.ConnConfig{})
		if err != nil {
			return err
		}
		defer pub.Close()
		purge := func() error { _, err := ch.QueuePurge(queue, false); return err }
		targets = append(targets, target{"RabbitMQ", func(n int) (float64, error) { return rawAMQP(ctx, cfg.RabbitMQURL, queue, n) }, pub, queue, purge})
	}
	if len(cfg.KafkaSeeds) == 0 {
		fmt.Fprintln(cfg.Out, "Kafka: skipped (no Kafka brokers given)")
	} else {
		kname := cfg.KafkaName
		if kname == "" {
			kname = "Kafka"
		}
		opts := []kgo.Opt{kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(time.Millisecond)}
		kcl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(cfg.KafkaSeeds...))...) // the raw baseline's
		if err != nil {
			return err
		}
		defer kcl.Close()
		kpub, err := txboxkafka.FromURL(ctx, "kafka://"+strings.Join(cfg.KafkaSeeds, ","), txboxkafka.PublisherConfig{}, opts...)
		if err != nil {
			return err
		}
		defer kpub.Close()
		ktopic := "txboxbench." + id
		targets = append(targets, target{kname, func(n int) (float64, error) { return rawKafka(ctx, kcl, ktopic, n) }, kpub, ktopic, func() error { return nil }})
	}

	// The relay's other ceiling: the same claim and mark statements with no
	// broker at all; with DeletePublished the mark is a DELETE.
	var rows []run
	for _, del := range []bool{false, true} {
		rows = append(rows, run{
			name:  "raw claim+" + markName(del) + ", no broker, batch 1000",
			fn:    func() (float64, error) { return rawClaimMark(ctx, cfg.Pool, 1000, 1, cfg.Rows, del) },
			setup: refill(ctx, cfg.Pool, ob, "claim.mark", cfg.Rows),
			n:     cfg.Rows,
		})
	}
	// Each target: its raw publish rate, then these relay setups.
	variants := []struct {
		name   string
		rc     relay.Config
		relays int
	}{
		{"1 relay, defaults (batch 100)", relay.Config{}, 1},
		{"1 relay, batch 1000", relay.Config{BatchSize: 1000}, 1},
		{"4 relays, batch 1000", relay.Config{BatchSize: 1000}, 4},
		{"1 relay, batch 1000, delete", relay.Config{BatchSize: 1000, Retention: relay.DeletePublished}, 1},
		{"4 relays, batch 1000, delete", relay.Config{BatchSize: 1000, Retention: relay.DeletePublished}, 4},
		{"1 relay, batch 5000, delete, 2 loops", relaytest.With(relay.Config{BatchSize: 5000, Retention: relay.DeletePublished}, relaytest.Config{Concurrency: 2}), 1},
	}
	perTarget := 1 + len(variants)
	for _, tg := range targets {
		rows = append(rows, run{
			name:  "raw " + tg.name + " publish from Go",
			fn:    func() (float64, error) { return tg.raw(cfg.Rows) },
			setup: tg.clean,
			n:     cfg.Rows,
		})
		queued := refill(ctx, cfg.Pool, ob, tg.topic, cfg.Rows)
		for _, v := range variants {
			rows = append(rows, run{
				name: fmt.Sprintf("relay → %s, %s", tg.name, v.name),
				fn:   func() (float64, error) { return drainInto(ctx, drv, tg.pub, v.rc, v.relays, cfg.Rows) },
				setup: func() error {
					if err := tg.clean(); err != nil {
						return err
					}
					return queued()
				},
				n: cfg.Rows,
			})
		}
	}
	med, err := interleave(cfg.Config, rows, nil, fmt.Sprintf("%d messages per run", cfg.Rows))
	if err != nil {
		return err
	}
	// The relay does the broker's work and the database's: where the two
	// share this machine's cores, it cannot beat the rate at which the cores
	// do both, cores ÷ (CPU per raw publish + CPU per raw claim and mark).
	withCPU := med.cpu[0].total > 0
	fmt.Fprintln(cfg.Out, "\nrelay drain as a share of: the broker's raw publish rate; min(raw publish, raw claim+mark or claim+delete)")
	if withCPU {
		fmt.Fprintf(cfg.Out, "and the CPU ceiling, %d cores ÷ (machine CPU per raw publish + per raw claim+mark or claim+delete):\n", runtime.NumCPU())
	}
	for i := 2; i < len(rows); i += perTarget {
		for j, v := range variants {
			db := 0
			if v.rc.Retention == relay.DeletePublished {
				db = 1
			}
			r := med.rate[i+1+j]
			fmt.Fprintf(cfg.Out, "  %-70s %5.0f%%  %5.0f%%", rows[i+1+j].name, 100*r/med.rate[i], 100*r/min(med.rate[i], med.rate[db]))
			if withCPU {
				ceiling := float64(runtime.NumCPU()) * 1e6 / (med.cpu[i].total + med.cpu[db].total)
				fmt.Fprintf(cfg.Out, "  %5.0f%% of %6.0f msgs/s", 100*r/ceiling, ceiling)
			}
			fmt.Fprintln(cfg.Out)
		}
	}
	return resetTable(ctx, cfg.Pool)
}

type jsBench struct {
	subject     string
	purge, done func() error
}

func natsjsStream(ctx context.Context, cfg BrokersConfig, run string) (jsBench, error) {
	js, err := jetstream.New(cfg.NATS)
	if err != nil {
		return jsBench{}, err
	}
	name := "TXBOX_BENCH_BR_" + strings.ToUpper(run)
	subject := "txboxbench.br." + run
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage})
	if err != nil {
		return jsBench{}, fmt.Errorf("create stream: %w", err)
	}
	return jsBench{
		subject: subject,
		purge:   func() error { return s.Purge(ctx) },
		done:    func() error { return js.DeleteStream(context.WithoutCancel(ctx), name) },
	}, nil
}

func markName(del bool) string {
	if del {
		return "delete"
	}
	return "mark"
}

// drainInto starts relays configured as rc publishing through pub and waits
// until they published n messages.
func drainInto(ctx context.Context, drv *txboxpgx.Driver, pub txbox.Publisher, rc relay.Config, relays, n int) (float64, error) {
	rc.PollInterval = 2 * time.Millisecond
	var rs []*relay.Relay
	for i := 0; i < relays; i++ {
		r, err := relay.New(drv, pub, rc)
		if err != nil {
			return 0, err
		}
		rs = append(rs, r)
	}
	start := time.Now()
	for _, r := range rs {
		if err := r.Start(ctx); err != nil {
			return 0, err
		}
	}
	defer func() {
		for _, r := range rs {
			_ = r.Stop(context.WithoutCancel(ctx))
		}
	}()
	for {
		var published, failed int64
		for _, r := range rs {
			c := relayseam.CountersOf(r) // not Stats: it reads the table measured
			published += c.Published
			failed += c.Rejected
		}
		if failed > 0 {
			return 0, fmt.Errorf("the broker rejected %d messages", failed)
		}
		if published >= int64(n) {
			return float64(published) / time.Since(start).Seconds(), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// rawAMQP publishes n persistent, mandatory messages with confirms, 1000
// at a time, each batch's confirms awaited before the next: the plain Go
// way with amqp091-go.
func rawAMQP(ctx context.Context, url, queue string, n int) (float64, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	start := time.Now()
	confs := make([]*amqp.DeferredConfirmation, 0, 1000)
	for i := 0; i < n; i += 1000 {
		confs = confs[:0]
		for j := i; j < min(i+1000, n); j++ {
			c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, MessageId: strconv.Itoa(j), Body: benchPayload})
			if err != nil {
				return 0, err
			}
			confs = append(confs, c)
		}
		for _, c := range confs {
			if ok, err := c.WaitContext(ctx); err != nil || !ok {
				return 0, fmt.Errorf("publish %d not confirmed: %v", c.DeliveryTag, err)
			}
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// rawXAdd appends n entries with the same fields as the publisher, in
// pipelines of 1000, each awaited before the next: the plain Go way.
func rawXAdd(ctx context.Context, rdb *redis.Client, stream string, n int) (float64, error) {
	start := time.Now()
	for i := 0; i < n; i += 1000 {
		pipe := rdb.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", strconv.Itoa(j), "key", "", "payload", benchPayload}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// rawAsynq enqueues n tasks with asynq's client from 64 goroutines (asynq
// enqueues one task per round trip).
func rawAsynq(ctx context.Context, rdb *redis.Client, queue string, n int) (float64, error) {
	c := asynq.NewClientFromRedisClient(rdb)
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36)
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	start := time.Now()
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				if _, err := c.EnqueueContext(ctx, asynq.NewTask("order.placed", benchPayload), asynq.Queue(queue), asynq.TaskID(prefix+strconv.Itoa(i))); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// rawKafka produces n records asynchronously and waits for every ack.
func rawKafka(ctx context.Context, cl *kgo.Client, topic string, n int) (float64, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	wg.Add(n)
	start := time.Now()
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: benchPayload}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// deleteKeys unlinks the keys matching pattern.
func deleteKeys(ctx context.Context, rdb *redis.Client, pattern string) error {
	iter := rdb.Scan(ctx, 0, pattern, 5000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 5000 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}
