package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/txbox/txbox/cmd/txbox/internal/bench"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/txboxdriver"
)

// Bounds of the bench flags (the values are checked at start, not after a
// long run).
var (
	benchRowsSetting     = setting[int]{flag: "rows", min: 1, max: 10_000_000}
	benchRepsSetting     = setting[int]{flag: "reps", min: 1, max: 100}
	benchDurationSetting = setting[time.Duration]{flag: "duration", min: 100 * time.Millisecond, max: time.Hour}
)

func newBenchCmd() *cobra.Command {
	var (
		dbURL, brokerURL, redisURL, rabbitURL, kafkaSeeds string
		cfg                                               bench.Config
	)
	cmd := &cobra.Command{
		Use:   "bench drain|add|order|latency|brokers|scale|all",
		Short: "Measure txbox beside hand-written baselines on your PostgreSQL and NATS",
		Long: `Measure txbox against hand-written baselines on the same PostgreSQL and NATS
server, side by side in one run, repeated and interleaved, and print ratios:

  drain    relay drain rate (batch 100 and 1000, 1 and 4 relays) beside the raw
           JetStream async-publish rate (short ids; and UUIDs with the
           Txbox-Created-At header, as the relay sends) and the raw
           claim-and-mark rate
  add      a business transaction with Outbox.Add against the same transaction
           with a hand-written INSERT of the same row, 1 and 8 writers
  order    drain with 1000 distinct ordering keys against unordered, 1 and 4 relays
  latency  commit-to-broker p50/p99 at 200, 1000 and 3000 events/s offered, with
           LISTEN/NOTIFY and polling only; writer throughput with and without
           the notify trigger
  brokers  relay drain into NATS, Redis Streams, asynq, RabbitMQ and Kafka
           beside each broker's raw publish rate (needs Redis: --redis; Kafka
           only with --kafka)
  scale    1, 2 and 4 relays, with and without lanes, into a no-op publisher:
           unordered, 1000 keys, 1000 keys with one hot key, and 20 keys; the
           relays' PostgreSQL backends' CPU per message
  all      all of them but brokers and scale

Everything runs in a new schema (txbox_bench_<time>_<pid>) that is dropped at the end;
streams are created and deleted on the NATS server. Durable numbers on a shared
machine are noisy: read the ratios, and the paired medians.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return errors.New("give one benchmark: drain, add, order, latency, brokers, scale or all (txbox bench --help says what each measures)")
			}
			return nil
		},
		ValidArgs: []string{"drain", "add", "order", "latency", "brokers", "scale", "all"},
		RunE: func(cmd *cobra.Command, args []string) error {
			which := args[0]
			runs := map[string]func(context.Context, bench.Config) error{
				"drain": bench.Drain, "add": bench.Add, "order": bench.Ordered, "latency": bench.Latency, "scale": bench.Scale,
				"brokers": func(ctx context.Context, cfg bench.Config) error {
					opt, _, err := redisstream.ParseURL(redisURL)
					if err != nil {
						return fmt.Errorf("--redis: %w", err)
					}
					rc := redis.NewClient(opt)
					defer rc.Close()
					var seeds []string
					if kafkaSeeds != "" {
						seeds = strings.Split(kafkaSeeds, ",")
					}
					return bench.Brokers(ctx, bench.BrokersConfig{Config: cfg, Redis: rc, RabbitMQURL: rabbitURL, KafkaSeeds: seeds})
				},
			}
			var order []string
			if which == "all" {
				order = []string{"add", "drain", "order", "latency"}
			} else if _, ok := runs[which]; ok {
				order = []string{which}
			} else {
				return fmt.Errorf("unknown benchmark %q (want drain, add, order, latency, brokers, scale or all)", which)
			}
			if which == "scale" {
				if err := bench.CheckScale(cfg); err != nil {
					return fmt.Errorf("bench scale: %w", err)
				}
			} else if fs := cmd.Flags(); fs.Changed("shapes") || fs.Changed("relays") || fs.Changed("delete-published") || fs.Changed("scheduled") {
				return fmt.Errorf("--shapes, --relays, --delete-published and --scheduled apply to bench scale only, not bench %s", which)
			}
			for _, err := range []error{
				benchRowsSetting.resolve(cmd.Flags(), cfg.Rows, &cfg.Rows),
				benchRepsSetting.resolve(cmd.Flags(), cfg.Reps, &cfg.Reps),
				benchDurationSetting.resolve(cmd.Flags(), cfg.AddTime, &cfg.AddTime),
			} {
				if err != nil {
					return err
				}
			}
			// Check every URL before the first service is touched.
			for _, u := range []struct{ flag, url string }{
				{"--redis", redisURL}, {"--rabbitmq", rabbitURL}, {sourceOf(cmd.Flags(), "broker", EnvBroker), brokerURL},
			} {
				if _, err := parseURL(u.flag, u.url); u.url != "" && err != nil {
					return err
				}
			}
			dbFlag := sourceOf(cmd.Flags(), "db", EnvDB)
			t, err := parseDBFrom(dbFlag, dbURL)
			if err != nil {
				return err
			}
			if t.dialect != txboxdriver.Postgres {
				return fmt.Errorf("txbox bench needs PostgreSQL: %s is a %s database (want postgres://…)", dbFlag, t.dialect)
			}
			ctx := cmd.Context()
			schema := fmt.Sprintf("txbox_bench_%d_%d", time.Now().Unix(), os.Getpid())
			admin, err := pgxpool.New(ctx, t.url)
			if err != nil {
				return fmt.Errorf("open %s: %w", t, redactErr(err, t.url))
			}
			defer admin.Close()
			if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
				return fmt.Errorf("create schema %s: %w", schema, err)
			}
			defer func() { _, _ = admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE") }()
			pc, err := pgxpool.ParseConfig(t.url)
			if err != nil {
				return fmt.Errorf("open %s: %w", t, redactErr(err, t.url))
			}
			pc.ConnConfig.RuntimeParams["search_path"] = schema
			pc.MaxConns = 20
			pool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				return fmt.Errorf("open %s: %w", t, redactErr(err, t.url))
			}
			defer pool.Close()
			np, err := natsjs.FromURL(ctx, brokerURL, natsjs.PublisherConfig{}, nats.Name("txbox bench"))
			if err != nil {
				return fmt.Errorf("--broker: %w", err)
			}
			defer np.Close()
			cfg.Pool, cfg.NATS, cfg.Out = pool, np.Conn(), cmd.OutOrStdout()
			for _, name := range order {
				fmt.Fprintf(cfg.Out, "== %s\n", name)
				if err := runs[name](ctx, cfg); err != nil {
					return fmt.Errorf("bench %s: %w", name, err)
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dbURL, "db", envOr(EnvDB, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	fs.StringVar(&brokerURL, "broker", envOr(EnvBroker, nats.DefaultURL), "NATS server URL")
	fs.StringVar(&redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL, for bench brokers")
	fs.StringVar(&rabbitURL, "rabbitmq", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL, for bench brokers; empty skips RabbitMQ")
	fs.StringVar(&kafkaSeeds, "kafka", "", "Kafka brokers (host:port,…) with topic auto-creation, for bench brokers; empty skips Kafka")
	fs.IntVar(&cfg.Rows, "rows", 200_000, "rows queued for each drain")
	fs.IntVar(&cfg.Reps, "reps", 3, "interleaved repetitions (medians are reported)")
	fs.DurationVar(&cfg.AddTime, "duration", 3*time.Second, "length of each timed measurement")
	fs.StringSliceVar(&cfg.Shapes, "shapes", nil, "bench scale: the backlogs to drain, of unordered, 1000-keys, skewed, 20-keys (default all)")
	fs.IntSliceVar(&cfg.Relays, "relays", nil, "bench scale: the numbers of relays to run, compared with the first (default 1,2,4)")
	fs.BoolVar(&cfg.DeletePublished, "delete-published", false, "bench scale: the relays delete each delivered row (as txbox relay --retention 0) instead of marking it")
	fs.IntVar(&cfg.Scheduled, "scheduled", 0, "bench scale: rows scheduled an hour ahead (Message.DeliverAt), written before each backlog and left pending")
	return cmd
}
