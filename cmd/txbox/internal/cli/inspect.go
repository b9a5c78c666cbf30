package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/txboxdriver"
)

func openInspector(cmd *cobra.Command, f *tableFlags) (*inspect.Inspector, func(), error) {
	return openTool(cmd, f, inspect.New[pgx.Tx], inspect.New[*sql.Tx])
}

// Bounds of the flags of stats and pending list.
var (
	watchIntervalSetting = setting[time.Duration]{flag: "interval", min: 100 * time.Millisecond}
	watchCountSetting    = setting[int]{flag: "count", min: 1, zero: true}
	pendingLimitSetting  = setting[int]{flag: "limit", min: 1, max: 10000}
	minAttemptsSetting   = setting[int]{flag: "min-attempts", min: 1, zero: true}
)

// age prints a duration for a table: milliseconds under a minute, seconds
// above.
func age(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func newStatsCmd(tty bool) *cobra.Command {
	var f tableFlags
	var asJSON, watch bool
	interval, count := 2*time.Second, 0
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show the outbox backlog: counts by state, oldest ages, top topics",
		Long: `Print the outbox table's undelivered rows by state (pending: never rejected;
retrying: rejected, tried again later; parked: behind a dead message of their
key; dead), the keys dead messages park, the age of the oldest outstanding row
(pending, retrying or parked) and of the oldest row a relay could claim now,
the messages delivered and gone dead in the last minute, and the topics with
the most undelivered rows (docs/reference/glossary.md defines each word). The counts come from one statement, the relay's backlog sample (the
txbox_outbox_* gauges of txboxprom); package inspect gives the same in Go.

With --watch it prints again every --interval until interrupted (or --count
times): on a terminal it redraws in place, otherwise it prints one block per
interval.`,
		Example: `  txbox stats --db postgres://app@localhost:5432/app
  txbox stats --json
  txbox stats --watch --interval 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := watchIntervalSetting.validate(interval); err != nil {
				return err
			}
			if err := watchCountSetting.validate(count); err != nil {
				return err
			}
			if count > 0 && !watch {
				return errors.New("--count needs --watch")
			}
			in, closeDB, err := openInspector(cmd, &f)
			if err != nil {
				return err
			}
			defer closeDB()
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for n := 1; ; n++ {
				b, err := in.Backlog(ctx)
				if err != nil {
					if watch && ctx.Err() != nil {
						return nil // interrupted mid-query
					}
					return fmt.Errorf("stats: %w", err)
				}
				var rate throughput
				rate.delivered, rate.dead, rate.err = in.Throughput(ctx, time.Minute)
				rate.ok = true
				t, terr := in.Table(ctx)
				if watch && tty && !asJSON {
					fmt.Fprint(out, "\x1b[H\x1b[2J")
				}
				if watch && !asJSON {
					fmt.Fprintf(out, "%s  %s\n", cell(f.table), time.Now().UTC().Format(time.RFC3339))
				}
				if err := printBacklog(out, b, t, terr, rate, asJSON); err != nil {
					return err
				}
				if !watch || n == count {
					return nil
				}
				if !tty && !asJSON {
					fmt.Fprintln(out)
				}
				select {
				case <-ctx.Done():
					return nil // SIGINT: a normal end of --watch
				case <-tick.C:
				}
			}
		},
	}
	f.register(cmd, false)
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print JSON (with --watch, one object per refresh)")
	fl.BoolVar(&watch, "watch", false, "print again every --interval until interrupted")
	fl.DurationVar(&interval, "interval", interval, "with --watch, the time between refreshes (at least 100ms)")
	fl.IntVar(&count, "count", count, "with --watch, stop after this many refreshes (0: until interrupted)")
	return cmd
}

// backlogJSON is stats --json.
type backlogJSON struct {
	Pending                   int64       `json:"pending"`
	Scheduled                 int64       `json:"scheduled"`
	Retrying                  int64       `json:"retrying"`
	Parked                    int64       `json:"parked"`
	ParkedKeys                int64       `json:"parked_keys"`
	Dead                      int64       `json:"dead"`
	Undelivered               int64       `json:"undelivered"`
	OldestPendingAgeSeconds   float64     `json:"oldest_pending_age_seconds"`
	OldestClaimableAgeSeconds float64     `json:"oldest_claimable_age_seconds"`
	Topics                    []topicJSON `json:"topics"`
	// DeliveredLastMinute and DeadLastMinute: from published_at and
	// dead_at; RateError when they could not be read.
	DeliveredLastMinute *int64 `json:"delivered_last_minute,omitempty"`
	DeadLastMinute      *int64 `json:"dead_last_minute,omitempty"`
	RateError           string `json:"rate_error,omitempty"`
	// Table: PostgreSQL only; TableError when it could not be read.
	Table      *tableJSON `json:"table,omitempty"`
	TableError string     `json:"table_error,omitempty"`
}

type tableJSON struct {
	SizeBytes          int64         `json:"size_bytes"`
	IndexSizeBytes     int64         `json:"index_size_bytes"`
	LiveRows           int64         `json:"live_rows"`
	DeadRows           int64         `json:"dead_rows"`
	SinceVacuumSeconds *float64      `json:"since_vacuum_seconds"` // null: never vacuumed
	OldestSnapshot     *snapshotJSON `json:"oldest_snapshot"`      // null: none
}

type snapshotJSON struct {
	Kind       string  `json:"kind"`
	Holder     string  `json:"holder"`
	State      string  `json:"state"`
	AgeSeconds float64 `json:"age_seconds"`
	XminAge    int64   `json:"xmin_age"`
}

type topicJSON struct {
	Topic       string `json:"topic"`
	Undelivered int64  `json:"undelivered"`
	Dead        int64  `json:"dead"`
}

// printBacklog prints b, and t unless terr says the database has no such
// figures (Inspector.Table off PostgreSQL).
// throughput is stats' last minute: messages delivered and gone dead.
type throughput struct {
	delivered, dead int64
	err             error
	ok              bool // read (false: not shown)
}

func printBacklog(out io.Writer, b inspect.Backlog, t inspect.Table, terr error, rate throughput, asJSON bool) error {
	if asJSON {
		j := backlogJSON{
			Pending: b.Pending, Scheduled: b.Scheduled, Retrying: b.Retrying, Parked: b.Parked, ParkedKeys: b.ParkedKeys, Dead: b.Dead,
			Undelivered: b.Undelivered(), OldestPendingAgeSeconds: b.OldestPendingAge.Seconds(),
			OldestClaimableAgeSeconds: b.OldestClaimableAge.Seconds(), Topics: []topicJSON{},
		}
		for _, t := range b.Topics {
			j.Topics = append(j.Topics, topicJSON(t))
		}
		if rate.ok && rate.err == nil {
			j.DeliveredLastMinute, j.DeadLastMinute = &rate.delivered, &rate.dead
		} else if rate.err != nil {
			j.RateError = rate.err.Error()
		}
		switch {
		case errors.Is(terr, errors.ErrUnsupported):
		case terr != nil:
			j.TableError = terr.Error()
		default:
			j.Table = &tableJSON{SizeBytes: t.Size, IndexSizeBytes: t.IndexSize, LiveRows: t.LiveRows, DeadRows: t.DeadRows}
			if t.Vacuumed {
				secs := t.SinceVacuum.Seconds()
				j.Table.SinceVacuumSeconds = &secs
			}
			if o := t.Oldest; o != nil {
				j.Table.OldestSnapshot = &snapshotJSON{Kind: o.Kind, Holder: o.Holder, State: o.State, AgeSeconds: o.Age.Seconds(), XminAge: o.XminAge}
			}
		}
		return writeJSON(out, j)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "pending\t%d\n", b.Pending)
	if b.Scheduled > 0 {
		fmt.Fprintf(tw, "scheduled\t%d\t(of pending: not due yet)\n", b.Scheduled)
	}
	fmt.Fprintf(tw, "retrying\t%d\n", b.Retrying)
	fmt.Fprintf(tw, "parked\t%d\t(waiting behind a dead message of their key; dead messages park %d key(s))\n", b.Parked, b.ParkedKeys)
	fmt.Fprintf(tw, "dead\t%d\n", b.Dead)
	fmt.Fprintf(tw, "outstanding\t%d\t(pending + retrying + parked)\n", b.Pending+b.Retrying+b.Parked)
	fmt.Fprintf(tw, "undelivered\t%d\t(outstanding + dead)\n", b.Undelivered())
	fmt.Fprintf(tw, "oldest outstanding age\t%s\n", age(b.OldestPendingAge))
	fmt.Fprintf(tw, "oldest claimable age\t%s\n", age(b.OldestClaimableAge))
	switch {
	case rate.err != nil:
		fmt.Fprintf(tw, "last minute\tunavailable: %s\n", text(rate.err.Error()))
	case rate.ok:
		fmt.Fprintf(tw, "delivered last minute\t%d\t(rows published within the last minute still in the table)\n", rate.delivered)
		fmt.Fprintf(tw, "went dead last minute\t%d\n", rate.dead)
	}
	printTable(tw, t, terr)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(b.Topics) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tUNDELIVERED\tDEAD")
	for _, t := range b.Topics {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", cell(t.Topic), t.Undelivered, t.Dead)
	}
	return tw.Flush()
}

// printTable prints the table's upkeep lines of stats (PostgreSQL).
func printTable(tw io.Writer, t inspect.Table, terr error) {
	switch {
	case errors.Is(terr, errors.ErrUnsupported):
		return
	case terr != nil:
		fmt.Fprintf(tw, "table\tunavailable: %s\n", text(terr.Error()))
		return
	}
	fmt.Fprintf(tw, "table size\t%s\t(indexes %s)\n", humanize.Bytes(uint64(max(t.Size, 0))), humanize.Bytes(uint64(max(t.IndexSize, 0))))
	vacuum := "never vacuumed"
	if t.Vacuumed {
		vacuum = "last VACUUM " + age(t.SinceVacuum) + " ago"
	}
	fmt.Fprintf(tw, "row versions\t%d live, %d to vacuum\t(%s; PostgreSQL's estimate, not messages)\n", t.LiveRows, t.DeadRows, vacuum)
	o := t.Oldest
	if o == nil {
		fmt.Fprintf(tw, "oldest snapshot\tnone\n")
		return
	}
	what := o.Kind + " " + o.Holder
	if o.State != "" {
		what += ", " + o.State
	}
	if o.Age > 0 {
		fmt.Fprintf(tw, "oldest snapshot\t%s\t(%s; %d transactions behind)\n", age(o.Age), cell(what), o.XminAge)
	} else {
		fmt.Fprintf(tw, "oldest snapshot\t%d transactions behind\t(%s)\n", o.XminAge, cell(what))
	}
}

func newPendingCmd() *cobra.Command {
	var f tableFlags
	cmd := &cobra.Command{
		Use:   "pending",
		Short: "List undelivered outbox messages (scheduled, retrying, parked), or cancel one",
		Long: `  txbox pending list         undelivered messages with their state, attempts,
                             next attempt (a scheduled one: its due time), age
                             and last error, oldest first
  txbox pending cancel ID...  discard messages not yet delivered, by message id

A message the broker keeps rejecting shows here with its attempts and last
error long before it goes dead (or forever, with --max-attempts off).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.register(cmd, true)
	cmd.AddCommand(newPendingListCmd(&f), newPendingCancelCmd(&f))
	return cmd
}

// canceller is a *txbox.Outbox of either driver.
type canceller interface {
	CancelNoTx(ctx context.Context, id string) (int, error)
}

func newPendingCancelCmd(f *tableFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID...",
		Short: "Discard undelivered messages by message id (a scheduled one before it is due)",
		Long: `Discard the outbox messages with these message ids before they are delivered:
every row with the id that no relay has published is deleted. A message a
relay is publishing at that moment is waited for on PostgreSQL and MySQL
(and then found delivered); on SQLite it is reported as being delivered.

For each ID one line says what happened: "cancelled", or why not: already
delivered (with the time), dead (txbox dead discard removes it), being
delivered, or no such message (never written, or delivered and deleted by
--retention). The exit status is 1 when any ID was not cancelled.`,
		Example: `  txbox pending cancel 0192f1c2-7d1e-7c3a-9a55-3f2b1c0d4e5f
  txbox pending list --key customer-7   # find the id`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			o, closeDB, err := openTool(cmd, f,
				func(d txboxdriver.Driver[pgx.Tx], c txbox.Config) (canceller, error) { return txbox.New(d, c) },
				func(d txboxdriver.Driver[*sql.Tx], c txbox.Config) (canceller, error) { return txbox.New(d, c) })
			if err != nil {
				return err
			}
			defer closeDB()
			out := cmd.OutOrStdout()
			failed := 0
			for _, id := range ids {
				n, err := o.CancelNoTx(cmd.Context(), id)
				switch {
				case err == nil:
					fmt.Fprintf(out, "%s\tcancelled (%d row(s) discarded)\n", cell(id), n)
					continue
				case errors.Is(err, txbox.ErrDelivered), errors.Is(err, txbox.ErrMessageDead), errors.Is(err, txbox.ErrInFlight),
					errors.Is(err, txbox.ErrMessageNotFound):
					fmt.Fprintf(out, "%s\tnot cancelled: %s\n", cell(id), cell(strings.TrimPrefix(err.Error(), "txbox: ")))
					failed++
				default:
					return fmt.Errorf("cancel %s: %w", cell(id), err)
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d message(s) not cancelled", failed, len(ids))
			}
			return nil
		},
	}
}

// rowJSON is one row of pending list --json.
type rowJSON struct {
	Seq           int64      `json:"seq"`
	ID            string     `json:"message_id"`
	Topic         string     `json:"topic"`
	Key           string     `json:"key"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	LastError     string     `json:"last_error"`
	CreatedAt     time.Time  `json:"created_at"`
	DeadAt        *time.Time `json:"dead_at"`
	AgeSeconds    float64    `json:"age_seconds"`
	Invalid       string     `json:"invalid,omitempty"`
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func toRowJSON(r inspect.Row) rowJSON {
	return rowJSON{Seq: r.Seq, ID: r.ID, Topic: r.Topic, Key: r.Key, State: string(r.State), Attempts: r.Attempts,
		NextAttemptAt: timeOrNil(r.NextAttemptAt), LastError: r.LastError, CreatedAt: r.CreatedAt.UTC(),
		DeadAt: timeOrNil(r.DeadAt), AgeSeconds: r.Age.Seconds(), Invalid: r.Invalid}
}

func newPendingListCmd(f *tableFlags) *cobra.Command {
	var filter inspect.Filter
	var asJSON bool
	var since time.Duration
	filter.Limit = 100
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List undelivered messages, oldest first",
		Long: `List undelivered messages, oldest first: SEQ, state, topic, key, attempts,
next attempt, age, last error. State is pending (due, never tried), scheduled
(never tried, due at the time in NEXT ATTEMPT/DUE: Message.DeliverAt, or a
plain-SQL writer's next_attempt_at), retrying (rejected, tried again from
NEXT ATTEMPT/DUE), parked or dead. With --scheduled only the scheduled
messages not due yet are listed, apart from the due ones: SEQ, topic, key,
due time, how long until it, age. At most --limit are printed; when more
match, the last line says so and how to page on (--after SEQ; with --json
the line goes to standard error).`,
		Example: `  txbox pending list --min-attempts 3
  txbox pending list --topic order.placed --key customer-7 --dead
  txbox pending list --error "no JetStream stream" --since 1h
  txbox pending list --limit 500 --after 20100
  txbox pending list --scheduled --topic payment.reminder
  txbox pending list --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pendingLimitSetting.validate(filter.Limit); err != nil {
				return err
			}
			if err := minAttemptsSetting.validate(filter.MinAttempts); err != nil {
				return err
			}
			if filter.Scheduled && (filter.Dead || filter.MinAttempts > 0) {
				return errors.New("--scheduled lists messages never tried and not due yet: --dead and --min-attempts select none of them")
			}
			in, closeDB, err := openInspector(cmd, f)
			if err != nil {
				return err
			}
			defer closeDB()
			if filter.Since, err = sinceTime(since); err != nil {
				return err
			}
			rows, more, err := in.Page(cmd.Context(), filter)
			if err != nil {
				return fmt.Errorf("list pending messages: %w", err)
			}
			out := cmd.OutOrStdout()
			cut := func(w io.Writer) {
				if more {
					fmt.Fprintf(w, "(cut at --limit %d: more undelivered messages match; next page: --after %d)\n", filter.Limit, rows[len(rows)-1].Seq)
				}
			}
			if asJSON {
				js := make([]rowJSON, len(rows))
				for i, r := range rows {
					js[i] = toRowJSON(r)
				}
				cut(cmd.ErrOrStderr())
				return writeJSON(out, js)
			}
			if len(rows) == 0 {
				if filter.Scheduled {
					fmt.Fprintln(out, "no scheduled messages waiting for their due time")
					return nil
				}
				fmt.Fprintln(out, "no undelivered messages")
				return nil
			}
			defer cut(out)
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			if filter.Scheduled {
				now := time.Now()
				fmt.Fprintln(tw, "SEQ\tTOPIC\tKEY\tDUE\tDUE IN\tAGE")
				for _, r := range rows {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Seq, cell(r.Topic), cell(r.Key),
						r.NextAttemptAt.UTC().Format(time.RFC3339), age(max(r.NextAttemptAt.Sub(now), 0)), age(r.Age))
				}
				return tw.Flush()
			}
			fmt.Fprintln(tw, "SEQ\tSTATE\tTOPIC\tKEY\tATTEMPTS\tNEXT ATTEMPT/DUE\tAGE\tLAST ERROR")
			for _, r := range rows {
				next := "-"
				if !r.NextAttemptAt.IsZero() {
					next = r.NextAttemptAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Seq, r.State, cell(r.Topic), cell(r.Key), r.Attempts,
					next, age(r.Age), cell(r.LastError))
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&filter.Topic, "topic", "", "only messages of this topic")
	fl.StringVar(&filter.Key, "key", "", "only messages of this ordering key")
	fl.IntVar(&filter.MinAttempts, "min-attempts", 0, "only messages the broker rejected at least this often")
	fl.BoolVar(&filter.Dead, "dead", false, "dead messages too")
	fl.BoolVar(&filter.Scheduled, "scheduled", false, "only the scheduled messages not due yet (Message.DeliverAt), with their due times")
	fl.StringVar(&filter.Error, "error", "", "only messages whose last error contains this text")
	fl.DurationVar(&since, "since", 0, "only messages created (dead ones: dead) within this long, e.g. 1h")
	fl.Int64Var(&filter.After, "after", 0, "start after this SEQ (the last of the page before)")
	fl.IntVar(&filter.Limit, "limit", filter.Limit, "show at most this many (1 to 10000)")
	fl.BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

// messageJSON is dead show --json.
type messageJSON struct {
	rowJSON
	Headers    map[string]string `json:"headers"`
	RawHeaders string            `json:"raw_headers,omitempty"`
	Payload    []byte            `json:"payload"` // base64
}

// sinceTime is now less d, or the zero time for 0.
func sinceTime(d time.Duration) (time.Time, error) {
	if d < 0 {
		return time.Time{}, fmt.Errorf("--since %s: want a positive duration", d)
	}
	if d == 0 {
		return time.Time{}, nil
	}
	return time.Now().Add(-d), nil
}

func newDeadShowCmd(f *tableFlags) *cobra.Command {
	var asJSON, raw bool
	cmd := &cobra.Command{
		Use:   "show SEQ",
		Short: "Show one message in full: payload, headers, last error",
		Long: `Print one undelivered message (dead or not) in full: its state, attempts,
times, last error, headers and payload. The table keeps each message's last
error only: that is its error history. With --raw only the payload's bytes
are written, unescaped (for a pipe or a file); with --json one object, the
payload base64-encoded.`,
		Example: `  txbox dead show 42
  txbox dead show 42 --raw > payload.bin`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || seq <= 0 {
				return fmt.Errorf("%q is not a SEQ (a positive row id from txbox dead list or txbox pending list)", args[0])
			}
			if raw && asJSON {
				return errors.New("--raw and --json exclude each other")
			}
			in, closeDB, err := openInspector(cmd, f)
			if err != nil {
				return err
			}
			defer closeDB()
			m, err := in.Show(cmd.Context(), seq)
			if errors.Is(err, inspect.ErrNotFound) {
				return fmt.Errorf("no undelivered message has SEQ %d (delivered, discarded or never written; see txbox dead list)", seq)
			}
			if err != nil {
				return fmt.Errorf("show %d: %w", seq, err)
			}
			out := cmd.OutOrStdout()
			switch {
			case raw:
				_, err := out.Write(m.Payload)
				return err
			case asJSON:
				j := messageJSON{rowJSON: toRowJSON(m.Row), Headers: m.Headers, Payload: m.Payload}
				if j.Headers == nil {
					j.Headers = map[string]string{}
				}
				if m.Invalid != "" {
					j.RawHeaders = m.RawHeaders
				}
				return writeJSON(out, j)
			}
			return printMessage(out, m, "", time.Time{}, 0)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object (payload base64-encoded)")
	cmd.Flags().BoolVar(&raw, "raw", false, "write the payload's bytes only, unescaped")
	return cmd
}
