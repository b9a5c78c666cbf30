package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/txboxkafka"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// dlqFlags are the flags of every dlq subcommand.
type dlqFlags struct {
	broker, binding string
	prefix, suffix  string
}

func (f *dlqFlags) register(cmd *cobra.Command) {
	fs := cmd.PersistentFlags()
	fs.StringVar(&f.broker, "broker", envOr(EnvBroker, ""), "the consumer's broker: nats://…, amqp://…, redis://…, kafka://host:9092 (env "+EnvBroker+")")
	fs.StringVar(&f.binding, "binding", "", "the handler's binding: STREAM/durable (JetStream), the queue (RabbitMQ), STREAM/GROUP (Redis), TOPIC/GROUP (Kafka)")
	fs.StringVar(&f.prefix, "dead-letter-prefix", natsjs.DefaultDeadLetterPrefix, "JetStream: the subscriber's DeadLetterPrefix")
	fs.StringVar(&f.suffix, "dead-letter-suffix", "", "Redis, Kafka: the subscriber's DeadLetterSuffix (default "+
		strconv.Quote(redisstream.DefaultDeadLetterSuffix)+" on Redis, "+strconv.Quote(txboxkafka.DefaultDeadLetterSuffix)+" on Kafka)")
}

// open connects to the broker and returns its dead letters.
func (f *dlqFlags) open(ctx context.Context) (dlq.Store, func(), error) {
	if f.binding == "" {
		return nil, nil, errors.New("--binding is required: the binding the handler consumes (see txbox dlq --help)")
	}
	if f.broker == "" {
		return nil, nil, fmt.Errorf("--broker (or %s) is required: the consumer's broker URL", EnvBroker)
	}
	scheme, err := checkBrokerURL("--broker", f.broker)
	if err != nil {
		return nil, nil, err
	}
	var st interface {
		dlq.Store
		Close() error
	}
	switch scheme {
	case "nats":
		st, err = natsjs.DeadLettersFromURL(ctx, f.broker, f.prefix, nats.Name("txbox dlq"))
	case "amqp", "amqps":
		st, err = txboxrabbitmq.DeadLettersFromURL(ctx, f.broker, txboxrabbitmq.ConnConfig{AMQP: amqp.Config{Properties: amqp.Table{"connection_name": "txbox dlq"}}})
	case "redis", "rediss":
		st, err = redisstream.DeadLettersFromURL(ctx, f.broker, f.suffix)
	case "kafka":
		st, err = txboxkafka.DeadLettersFromURL(ctx, f.broker, f.suffix, kgo.ClientID("txbox dlq"))
	default:
		return nil, nil, fmt.Errorf("--broker %s: txbox dlq reads the dead letters of NATS JetStream, RabbitMQ, Redis Streams and Kafka; not of %s", redact(f.broker, f.broker), scheme)
	}
	if err != nil {
		return nil, nil, redactErr(err, f.broker)
	}
	return st, func() { _ = st.Close() }, nil
}

// filterFlags are the filters of dlq list, redrive and discard.
type filterFlags struct {
	topic, key, errText string
	since               time.Duration
	ids                 []string
}

func (f *filterFlags) register(cmd *cobra.Command, what string) {
	fl := cmd.Flags()
	fl.StringVar(&f.topic, "topic", "", "only "+what+" of this topic (exactly)")
	fl.StringVar(&f.key, "key", "", "only "+what+" of this ordering key (exactly)")
	fl.StringVar(&f.errText, "error", "", "only "+what+" whose last error contains this text")
	fl.DurationVar(&f.since, "since", 0, "only "+what+" that went dead within this long (e.g. 1h)")
	if what == "dead letters" {
		fl.StringSliceVar(&f.ids, "id", nil, "only the dead letters of this message id (repeat or comma-separate)")
	}
}

// set reports whether any filter is given.
func (f *filterFlags) set() bool {
	return f.topic != "" || f.key != "" || f.errText != "" || f.since != 0 || len(f.ids) > 0
}

func (f *filterFlags) dlq() (dlq.Filter, error) {
	if f.since < 0 {
		return dlq.Filter{}, fmt.Errorf("--since %s: want a positive duration", f.since)
	}
	out := dlq.Filter{Topic: f.topic, Key: f.key, Error: f.errText, IDs: f.ids}
	if f.since > 0 {
		out.Since = time.Now().Add(-f.since)
	}
	return out, nil
}

func newDLQCmd() *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, redrive or discard the consumer's dead letters on the broker",
		Long: `A message a consumer handler gives up on (it failed MaxDeliveries times, or
returned consumer.Permanent) is dead-lettered on the broker: to the subject
txbox.dlq.STREAM.durable on JetStream (in whichever stream captures it), to
the queue <queue>.dlq on RabbitMQ, to the stream STREAM:dead on Redis, to
the topic TOPIC.dead on Kafka.

  txbox dlq list              the binding's dead letters: id, topic, deliveries, error
  txbox dlq show REF          one in full: headers, payload (escaped, clipped)
  txbox dlq redrive REF...    send them back to the binding with their original
                              message id (an inbox handler still dedupes them)
  txbox dlq discard REF...    delete them

REF is what list prints: a stream sequence (JetStream), a message id
(RabbitMQ), an entry id (Redis), PARTITION:OFFSET in the dead-letter topic
(Kafka, where a redriven or discarded dead letter stays in the topic,
settled by a marker record after it). redrive and discard also take --all, or the
filters of list (--topic, --key, --error, --since), with --dry-run to print
what they would do; acting on a set (not on REFs) asks for confirmation on a
terminal, and needs --yes when standard input is not a terminal.

Go: package dlq, and natsjs.NewDeadLetters, txboxrabbitmq.NewDeadLetters,
redisstream.NewDeadLetters, txboxkafka.NewDeadLetters.`,
		Example: `  txbox dlq list --broker nats://127.0.0.1:4222 --binding ORDERS/shipping
  txbox dlq show 42 --broker nats://127.0.0.1:4222 --binding ORDERS/shipping
  txbox dlq redrive --error "timeout" --dry-run --broker redis://127.0.0.1:6379 --binding orders/shipping
  txbox dlq redrive --all --yes --broker amqp://guest:guest@127.0.0.1:5672/ --binding shipping
  txbox dlq list --broker kafka://127.0.0.1:9092 --binding orders/shipping`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.register(cmd)
	cmd.AddCommand(newDLQListCmd(&f), newDLQShowCmd(&f), newDLQActionCmd(&f, "redrive"), newDLQActionCmd(&f, "discard"))
	return cmd
}

// letterJSON is one dead letter of dlq list --json and dlq show --json.
type letterJSON struct {
	Ref        string            `json:"ref"`
	Binding    string            `json:"binding"`
	ID         string            `json:"message_id"`
	Topic      string            `json:"topic"`
	Key        string            `json:"key"`
	Deliveries int               `json:"deliveries"`
	Error      string            `json:"error"`
	DeadAt     *time.Time        `json:"dead_at"`
	CreatedAt  *time.Time        `json:"created_at"`
	Headers    map[string]string `json:"headers,omitempty"`
	Payload    []byte            `json:"payload,omitempty"` // base64
}

func toLetterJSON(l dlq.Letter, full bool) letterJSON {
	j := letterJSON{Ref: l.Ref, Binding: l.Binding, ID: l.ID, Topic: l.Topic, Key: l.Key, Deliveries: l.Deliveries,
		Error: l.Error, DeadAt: timeOrNil(l.DeadAt), CreatedAt: timeOrNil(l.CreatedAt)}
	if full {
		j.Headers, j.Payload = l.Headers, l.Payload
		if j.Headers == nil {
			j.Headers = map[string]string{}
		}
	}
	return j
}

func timeCell(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// dlqLimitSetting bounds dlq list --limit.
var dlqLimitSetting = setting[int]{flag: "limit", min: 1, max: 10000}

func newDLQListCmd(f *dlqFlags) *cobra.Command {
	var ff filterFlags
	var asJSON bool
	q := dlq.Query{Limit: 100}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the binding's dead letters, oldest first",
		Long: `List the binding's dead letters, oldest first: REF, message id, topic, key,
deliveries, when it went dead, the last error. At most --limit are printed;
when more match, the last line says so and how to page on (--after REF).`,
		Example: `  txbox dlq list --broker nats://127.0.0.1:4222 --binding ORDERS/shipping --error timeout
  txbox dlq list --broker nats://127.0.0.1:4222 --binding ORDERS/shipping --limit 50 --after 1234`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := dlqLimitSetting.validate(q.Limit); err != nil {
				return err
			}
			var err error
			if q.Filter, err = ff.dlq(); err != nil {
				return err
			}
			s, closeStore, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer closeStore()
			p, err := s.List(cmd.Context(), f.binding, q)
			if err != nil {
				return fmt.Errorf("list dead letters of %s: %w", f.binding, err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				js := struct {
					Letters []letterJSON `json:"letters"`
					More    bool         `json:"more"`
				}{Letters: []letterJSON{}, More: p.More}
				for _, l := range p.Letters {
					js.Letters = append(js.Letters, toLetterJSON(l, false))
				}
				return writeJSON(out, js)
			}
			if len(p.Letters) == 0 {
				fmt.Fprintf(out, "no dead letters of %s\n", cell(f.binding))
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "REF\tMESSAGE ID\tTOPIC\tKEY\tDELIVERIES\tDEAD SINCE\tERROR")
			for _, l := range p.Letters {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", cell(l.Ref), cell(l.ID), cell(l.Topic), cell(l.Key), l.Deliveries,
					timeCell(l.DeadAt), cell(clip(l.Error, 200)))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if p.More {
				fmt.Fprintf(out, "(cut at --limit %d: more dead letters match; next page: --after %s)\n", q.Limit, cell(p.Letters[len(p.Letters)-1].Ref))
			}
			return nil
		},
	}
	ff.register(cmd, "dead letters")
	fl := cmd.Flags()
	fl.IntVar(&q.Limit, "limit", q.Limit, "show at most this many (1 to 10000)")
	fl.StringVar(&q.After, "after", "", "start after this REF (the last of the page before)")
	fl.BoolVar(&asJSON, "json", false, `print {"letters": […], "more": bool}`)
	return cmd
}

// clip cuts s to n bytes at most, saying how much was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes more)", strings.ToValidUTF8(s[:n], ""), len(s)-n)
}

// payloadClip is how much of a payload dlq show prints.
const payloadClip = 4096

func newDLQShowCmd(f *dlqFlags) *cobra.Command {
	var asJSON, raw bool
	cmd := &cobra.Command{
		Use:   "show REF",
		Short: "Show one dead letter in full: why, where from, headers, payload",
		Long: `Print one dead letter: its message id, binding, topic, key, deliveries, when
it went dead, the last error, its headers and its payload, escaped and cut at
4 KiB (--raw writes the payload's bytes only, whole and unescaped; --json one
object, the payload base64-encoded).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if raw && asJSON {
				return errors.New("--raw and --json exclude each other")
			}
			s, closeStore, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer closeStore()
			l, err := s.Get(cmd.Context(), f.binding, args[0])
			if errors.Is(err, dlq.ErrNotFound) {
				return fmt.Errorf("%s is not a dead letter of %s (redriven, discarded or never there; see txbox dlq list): %w", args[0], f.binding, err)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case raw:
				_, err := out.Write(l.Payload)
				return err
			case asJSON:
				return writeJSON(out, toLetterJSON(l, true))
			}
			printLetter(out, l)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object (payload base64-encoded)")
	cmd.Flags().BoolVar(&raw, "raw", false, "write the payload's bytes only, unescaped")
	return cmd
}

func printLetter(out io.Writer, l dlq.Letter) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ref\t%s\n", cell(l.Ref))
	fmt.Fprintf(tw, "message id\t%s\n", cell(l.ID))
	fmt.Fprintf(tw, "binding\t%s\n", cell(l.Binding))
	fmt.Fprintf(tw, "topic\t%s\n", cell(l.Topic))
	fmt.Fprintf(tw, "key\t%s\n", cell(l.Key))
	fmt.Fprintf(tw, "deliveries\t%d\n", l.Deliveries)
	fmt.Fprintf(tw, "created at\t%s\n", timeCell(l.CreatedAt))
	fmt.Fprintf(tw, "dead since\t%s\n", timeCell(l.DeadAt))
	fmt.Fprintf(tw, "error\t%s\n", cell(l.Error))
	_ = tw.Flush()
	fmt.Fprintf(out, "headers (%d):\n", len(l.Headers))
	for _, k := range slices.Sorted(maps.Keys(l.Headers)) {
		fmt.Fprintf(out, "  %s: %s\n", cell(k), cell(l.Headers[k]))
	}
	fmt.Fprintf(out, "payload (%d bytes):\n%s\n", len(l.Payload), text(clip(string(l.Payload), payloadClip)))
}

// confirmBulk asks, on a terminal, whether to act on what; off a terminal
// it needs yes.
func confirmBulk(cmd *cobra.Command, yes bool, what string) error {
	if yes {
		return nil
	}
	in := cmd.InOrStdin()
	if !isTerminal(in) {
		return fmt.Errorf("%s: standard input is not a terminal, so nothing was asked: add --yes (or --dry-run to see what it would do)", what)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s? [y/N] ", what)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("not confirmed; nothing done")
	}
	return nil
}

func newDLQActionCmd(f *dlqFlags, action string) *cobra.Command {
	var ff filterFlags
	var all, dryRun, yes, asJSON bool
	short := "Send dead letters back to their binding with their original message id"
	if action == "discard" {
		short = "Delete dead letters"
	}
	cmd := &cobra.Command{
		Use:   action + " [REF...]",
		Short: short,
		Long: short + `.

Give the REFs (from txbox dlq list), or choose a set: --all, or the filters
--topic, --key, --error, --since (together: a letter must pass each).
--dry-run prints the letters it would ` + action + ` and changes nothing. Acting on a
set asks for confirmation on a terminal; when standard input is not a
terminal, --yes is required instead.` + map[string]string{"redrive": `

A redriven message goes back to the binding it was dead-lettered from only
(JetStream: republished to its subject, other durables of the stream skip
it; RabbitMQ: through <queue>.retry; Redis: appended to its stream, other
groups skip it; Kafka: produced to its topic, other groups skip it), with
its original message id, its payload and headers, and
a fresh delivery count: an inbox handler that did handle it meanwhile drops
it as a duplicate.`, "discard": ""}[action],
		Example: `  txbox dlq ` + action + ` 41 42 --broker nats://127.0.0.1:4222 --binding ORDERS/shipping
  txbox dlq ` + action + ` --error "connection refused" --since 1h --dry-run --broker nats://127.0.0.1:4222 --binding ORDERS/shipping
  txbox dlq ` + action + ` --all --yes --broker redis://127.0.0.1:6379 --binding orders/shipping`,
		RunE: func(cmd *cobra.Command, args []string) error {
			set := all || ff.set()
			if len(args) > 0 && set {
				return errors.New("give REFs, or choose a set with --all or the filters, not both")
			}
			if len(args) == 0 && !set {
				return errors.New("give the REFs of the dead letters (see txbox dlq list), --all, or filters (--topic, --key, --error, --since)")
			}
			filter, err := ff.dlq()
			if err != nil {
				return err
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			s, closeStore, err := f.open(ctx)
			if err != nil {
				return err
			}
			defer closeStore()
			var chosen []dlq.Letter
			if set {
				if chosen, err = dlq.All(ctx, s, f.binding, filter); err != nil {
					return fmt.Errorf("list dead letters of %s: %w", f.binding, err)
				}
			} else {
				for _, ref := range args {
					l, err := s.Get(ctx, f.binding, ref)
					if err != nil {
						return fmt.Errorf("%s: %w", ref, err)
					}
					chosen = append(chosen, l)
				}
			}
			if dryRun {
				if asJSON {
					js := []letterJSON{}
					for _, l := range chosen {
						js = append(js, toLetterJSON(l, false))
					}
					return writeJSON(out, struct {
						Action  string       `json:"action"`
						DryRun  bool         `json:"dry_run"`
						Letters []letterJSON `json:"letters"`
					}{action, true, js})
				}
				fmt.Fprintf(out, "would %s %d dead letter(s) of %s:\n", action, len(chosen), cell(f.binding))
				for _, l := range chosen {
					fmt.Fprintf(out, "  %s  %s  %s  %s\n", cell(l.Ref), cell(l.ID), cell(l.Topic), cell(clip(l.Error, 120)))
				}
				return nil
			}
			if len(chosen) == 0 {
				fmt.Fprintf(out, "no dead letters of %s match; nothing to %s\n", cell(f.binding), action)
				return nil
			}
			if set {
				if err := confirmBulk(cmd, yes, fmt.Sprintf("%s %d dead letter(s) of %s", action, len(chosen), cell(f.binding))); err != nil {
					return err
				}
			}
			do := s.Redrive
			if action == "discard" {
				do = s.Discard
			}
			r, err := do(ctx, f.binding, dlq.Refs(chosen))
			if asJSON {
				js := struct {
					Action string   `json:"action"`
					Done   []string `json:"done"`
					Missed []string `json:"missed"`
					Error  string   `json:"error,omitempty"`
				}{Action: action, Done: append([]string{}, r.Done...), Missed: append([]string{}, r.Missed...)}
				if err != nil {
					js.Error = err.Error()
				}
				if werr := writeJSON(out, js); werr != nil {
					return werr
				}
			} else {
				past := map[string]string{"redrive": "redrove", "discard": "discarded"}[action]
				fmt.Fprintf(out, "%s %d dead letter(s) of %s\n", past, len(r.Done), cell(f.binding))
				if len(r.Missed) > 0 {
					fmt.Fprintf(out, "gone meanwhile (redriven or discarded by someone else): %s\n", cell(strings.Join(r.Missed, " ")))
				}
			}
			if err != nil {
				return fmt.Errorf("%s stopped after %d: %w", action, len(r.Done), err)
			}
			return nil
		},
	}
	ff.register(cmd, "dead letters")
	fl := cmd.Flags()
	fl.BoolVar(&all, "all", false, "every dead letter of the binding")
	fl.BoolVar(&dryRun, "dry-run", false, "print what would be done; change nothing")
	fl.BoolVar(&yes, "yes", false, "do not ask for confirmation (required off a terminal for --all or filters)")
	fl.BoolVar(&asJSON, "json", false, "print a JSON object")
	return cmd
}
