package cli

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/txbox/txbox/dead"
)

func newDeadCmd() *cobra.Command {
	var f tableFlags
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, redrive or discard dead outbox messages",
		Long: `A message the broker rejected --max-attempts times is dead: the relay no
longer tries it, and later messages with the same ordering key wait behind it
(other keys keep flowing).

  txbox dead list              show dead messages and how many each parks
  txbox dead show SEQ          one message in full: payload, headers, last error
  txbox dead redrive SEQ...    try them again with a fresh attempt budget
  txbox dead discard SEQ...    delete them; their keys resume with the next message

SEQ is the row id that list prints; --all acts on every dead message.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.register(cmd, true)
	cmd.AddCommand(newDeadListCmd(&f), newDeadShowCmd(&f), newDeadActionCmd(&f, "redrive"), newDeadActionCmd(&f, "discard"))
	return cmd
}

func openLetters(cmd *cobra.Command, f *tableFlags) (*dead.Letters, func(), error) {
	return openTool(cmd, f, dead.New[pgx.Tx], dead.New[*sql.Tx])
}

// deadLimitSetting bounds dead list --limit.
var deadLimitSetting = setting[int]{flag: "limit", min: 1, max: 10000}

func newDeadListCmd(f *tableFlags) *cobra.Command {
	limit := 100
	var after int64
	var ff filterFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead messages, oldest first",
		Long: `List dead messages, oldest first: SEQ, message id, topic, key, how many later
messages of its key it parks, attempts, since when it is dead, the last error.
The filters --topic, --key, --error and --since choose which (a message must
pass each); at most --limit are printed, and when more match the last line
says so and how to page on (--after SEQ; with --json the line goes to
standard error).`,
		Example: `  txbox dead list --topic order.placed --error "no JetStream stream" --since 2h
  txbox dead list --limit 50 --after 1200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := deadLimitSetting.validate(limit); err != nil {
				return err
			}
			filter, err := ff.dead()
			if err != nil {
				return err
			}
			filter.After, filter.Limit = after, limit
			l, closeDB, err := openLetters(cmd, f)
			if err != nil {
				return err
			}
			defer closeDB()
			list, more, err := l.Find(cmd.Context(), filter)
			if err != nil {
				return fmt.Errorf("list dead messages: %w", err)
			}
			out := cmd.OutOrStdout()
			cut := func(w io.Writer) {
				if more {
					fmt.Fprintf(w, "(cut at --limit %d: more dead messages match; next page: --after %d)\n", limit, list[len(list)-1].Seq)
				}
			}
			if asJSON {
				js := make([]deadJSON, len(list))
				for i, m := range list {
					js[i] = deadJSON{Seq: m.Seq, ID: m.ID, Topic: m.Topic, Key: m.Key, Parks: m.Parked, Attempts: m.Attempts,
						LastError: m.LastError, CreatedAt: m.CreatedAt.UTC(), DeadAt: m.DeadAt.UTC()}
				}
				cut(cmd.ErrOrStderr())
				return writeJSON(out, js)
			}
			if len(list) == 0 {
				if ff.set() || after > 0 {
					fmt.Fprintln(out, "no dead messages match")
				} else {
					fmt.Fprintln(out, "no dead messages")
				}
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tMESSAGE ID\tTOPIC\tKEY\tPARKS\tATTEMPTS\tDEAD SINCE\tLAST ERROR")
			for _, m := range list {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", m.Seq, cell(m.ID), cell(m.Topic), cell(m.Key), m.Parked, m.Attempts,
					m.DeadAt.UTC().Format(time.RFC3339), cell(m.LastError))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			cut(out)
			return nil
		},
	}
	ff.register(cmd, "dead messages")
	cmd.Flags().IntVar(&limit, "limit", limit, "show at most this many (1 to 10000)")
	cmd.Flags().Int64Var(&after, "after", 0, "start after this SEQ (the last of the page before)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

// dead returns the filters as a dead.Filter.
func (f *filterFlags) dead() (dead.Filter, error) {
	d, err := f.dlq()
	return dead.Filter{Topic: d.Topic, Key: d.Key, Error: d.Error, Since: d.Since}, err
}

// deadJSON is one row of dead list --json.
type deadJSON struct {
	Seq       int64     `json:"seq"`
	ID        string    `json:"message_id"`
	Topic     string    `json:"topic"`
	Key       string    `json:"key"`
	Parks     int64     `json:"parks"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error"`
	CreatedAt time.Time `json:"created_at"`
	DeadAt    time.Time `json:"dead_at"`
}

func newDeadActionCmd(f *tableFlags, action string) *cobra.Command {
	var all, asJSON, dryRun, yes bool
	var ff filterFlags
	short := "Make dead messages pending again with a fresh attempt budget"
	if action == "discard" {
		short = "Delete dead messages, releasing the keys they park"
	}
	cmd := &cobra.Command{
		Use:   action + " [SEQ...]",
		Short: short,
		Long: short + `.

Each message is ` + map[string]string{"redrive": "redriven", "discard": "discarded"}[action] + ` or refused on its own: a row the database
refuses (a dead row that breaks the table's checks, such as one the contract
migration parked as invalid) stays dead and is named with the database's
reason, and the others are done. The command exits non-zero when any row
was refused or any SEQ given is not a dead message.

Choose the messages by SEQ, or a set: --all, or the filters --topic, --key,
--error, --since (a message must pass each). --dry-run prints what would be
done and changes nothing. A set is confirmed: on a terminal the command asks;
when standard input is not a terminal, --yes is required.`,
		Example: `  txbox dead ` + action + ` 41 42
  txbox dead ` + action + ` --topic order.placed --error "no JetStream stream" --dry-run
  txbox dead ` + action + ` --all --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			set := all || ff.set()
			if set && len(args) > 0 {
				return fmt.Errorf("give the SEQs of the dead messages or --all (or filters), not both (%s every dead message with --all alone)", action)
			}
			if !set && len(args) == 0 {
				return errors.New("give the SEQs of the dead messages (see txbox dead list), --all, or filters (--topic, --key, --error, --since)")
			}
			filter, err := ff.dead()
			if err != nil {
				return err
			}
			seqs := make([]int64, 0, len(args))
			for _, a := range args {
				n, err := strconv.ParseInt(a, 10, 64)
				if err != nil || n <= 0 {
					return fmt.Errorf("%q is not a SEQ (a positive row id from txbox dead list)", a)
				}
				if !slices.Contains(seqs, n) {
					seqs = append(seqs, n)
				}
			}
			l, closeDB, err := openLetters(cmd, f)
			if err != nil {
				return err
			}
			defer closeDB()
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			if set && (ff.set() || dryRun) {
				chosen, err := l.All(ctx, filter)
				if err != nil {
					return fmt.Errorf("list dead messages: %w", err)
				}
				if dryRun {
					fmt.Fprintf(out, "would %s %d dead message(s):\n", action, len(chosen))
					for _, m := range chosen {
						fmt.Fprintf(out, "  %d  %s  %s  %s  %s\n", m.Seq, cell(m.ID), cell(m.Topic), cell(m.Key), cell(clip(m.LastError, 120)))
					}
					return nil
				}
				if len(chosen) == 0 {
					fmt.Fprintf(out, "no dead messages match; nothing to %s\n", action)
					return nil
				}
				for _, m := range chosen {
					seqs = append(seqs, m.Seq)
				}
			}
			if dryRun {
				for _, seq := range seqs {
					m, err := l.Get(ctx, seq)
					if errors.Is(err, dead.ErrNotFound) {
						fmt.Fprintf(out, "would skip %d: not a dead message\n", seq)
						continue
					}
					if err != nil {
						return err
					}
					fmt.Fprintf(out, "would %s %d  %s  %s  %s  %s\n", action, m.Seq, cell(m.ID), cell(m.Topic), cell(m.Key), cell(clip(m.LastError, 120)))
				}
				return nil
			}
			if set {
				what := fmt.Sprintf("%s every dead message", action)
				if len(seqs) > 0 {
					what = fmt.Sprintf("%s %d dead message(s)", action, len(seqs))
				}
				if err := confirmBulk(cmd, yes, what); err != nil {
					return err
				}
			}
			do := l.Redrive
			if action == "discard" {
				do = l.Discard
			}
			n, err := do(ctx, seqs...)
			var refused *dead.RefusedError
			if errors.As(err, &refused) {
				err = refused.Err
			}
			if err != nil {
				// The action stopped: what was done is reported first.
				if n > 0 || refused != nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %d dead message(s) before the error\n", deadVerb[action], n)
				}
				return fmt.Errorf("%s: %w", action, err)
			}
			res := deadActionJSON{Action: action, Count: n, Refused: []deadRefusedJSON{}}
			if refused != nil {
				for _, r := range refused.Rows {
					res.Refused = append(res.Refused, deadRefusedJSON(r))
				}
			}
			if len(seqs) > 0 {
				res.Missed = int64(len(seqs)) - n - int64(len(res.Refused))
			}
			if asJSON {
				if err := writeJSON(out, res); err != nil {
					return err
				}
			} else {
				if n > 0 || (len(seqs) == 0 && len(res.Refused) == 0) {
					fmt.Fprintf(out, "%s %d dead message(s)\n", deadVerb[action], n)
				}
				for _, r := range res.Refused {
					fmt.Fprintf(out, "refused seq %d: %s\n", r.Seq, cell(r.Reason))
				}
			}
			var problems []string
			if len(res.Refused) > 0 {
				problems = append(problems, fmt.Sprintf("the database refused to %s %d dead message(s) (seq %s)", action, len(res.Refused), refusedSeqs(res.Refused)))
			}
			if res.Missed > 0 {
				problems = append(problems, fmt.Sprintf("%d of the %d SEQs given are not dead messages (no such row, or pending, delivered, redriven or discarded already: see txbox dead list)",
					res.Missed, len(seqs)))
			}
			if len(problems) > 0 {
				return errors.New(strings.Join(problems, "; "))
			}
			return nil
		},
	}
	ff.register(cmd, "dead messages")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be done; change nothing")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation (required off a terminal with --all or filters)")
	cmd.Flags().BoolVar(&all, "all", false, "act on every dead message")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object: action, count, refused (seq, reason), missed")
	return cmd
}

var deadVerb = map[string]string{"redrive": "redrove", "discard": "discarded"}

// deadActionJSON is the output of dead redrive|discard --json.
type deadActionJSON struct {
	Action  string            `json:"action"`
	Count   int64             `json:"count"`   // rows done
	Refused []deadRefusedJSON `json:"refused"` // rows the database refused, left as they were
	Missed  int64             `json:"missed"`  // SEQs given that are not dead messages
}

type deadRefusedJSON struct {
	Seq    int64  `json:"seq"`
	Reason string `json:"reason"`
}

// refusedSeqs lists the first few refused seqs.
func refusedSeqs(rows []deadRefusedJSON) string {
	var b strings.Builder
	for i, r := range rows {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(rows)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(r.Seq, 10))
	}
	return b.String()
}
