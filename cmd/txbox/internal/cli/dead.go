package cli

import (
	"database/sql"
	"errors"
	"fmt"
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
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead messages, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := deadLimitSetting.validate(limit); err != nil {
				return err
			}
			l, closeDB, err := openLetters(cmd, f)
			if err != nil {
				return err
			}
			defer closeDB()
			list, err := l.List(cmd.Context(), limit)
			if err != nil {
				return fmt.Errorf("list dead messages: %w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				js := make([]deadJSON, len(list))
				for i, m := range list {
					js[i] = deadJSON{Seq: m.Seq, ID: m.ID, Topic: m.Topic, Key: m.Key, Parks: m.Parked, Attempts: m.Attempts,
						LastError: m.LastError, CreatedAt: m.CreatedAt.UTC(), DeadAt: m.DeadAt.UTC()}
				}
				return writeJSON(out, js)
			}
			if len(list) == 0 {
				fmt.Fprintln(out, "no dead messages")
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tMESSAGE ID\tTOPIC\tKEY\tPARKS\tATTEMPTS\tDEAD SINCE\tLAST ERROR")
			for _, m := range list {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", m.Seq, cell(m.ID), cell(m.Topic), cell(m.Key), m.Parked, m.Attempts,
					m.DeadAt.UTC().Format(time.RFC3339), cell(m.LastError))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", limit, "show at most this many (1 to 10000)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
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
	var all, asJSON bool
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
was refused or any SEQ given is not a dead message.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all && len(args) > 0 {
				return fmt.Errorf("give the SEQs of the dead messages or --all, not both (%s every dead message with --all alone)", action)
			}
			if !all && len(args) == 0 {
				return errors.New("give the SEQs of the dead messages (see txbox dead list), or --all")
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
			do := l.Redrive
			if action == "discard" {
				do = l.Discard
			}
			n, err := do(cmd.Context(), seqs...)
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
			out := cmd.OutOrStdout()
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
