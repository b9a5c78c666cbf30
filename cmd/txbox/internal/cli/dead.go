package cli

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
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
	var all bool
	short := "Make dead messages pending again with a fresh attempt budget"
	if action == "discard" {
		short = "Delete dead messages, releasing the keys they park"
	}
	cmd := &cobra.Command{
		Use:   action + " [SEQ...]",
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all && len(args) > 0 {
				return fmt.Errorf("give the SEQs of the dead messages or --all, not both (%s every dead message with --all alone)", action)
			}
			if !all && len(args) == 0 {
				return errors.New("give the SEQs of the dead messages (see txbox dead list), or --all")
			}
			seqs := make([]int64, len(args))
			for i, a := range args {
				n, err := strconv.ParseInt(a, 10, 64)
				if err != nil || n <= 0 {
					return fmt.Errorf("%q is not a SEQ (a positive row id from txbox dead list)", a)
				}
				seqs[i] = n
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
			if err != nil {
				return fmt.Errorf("%s: %w", action, err)
			}
			verb := map[string]string{"redrive": "redrove", "discard": "discarded"}[action]
			if n > 0 || len(seqs) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %d dead message(s)\n", verb, n)
			}
			if len(seqs) > 0 && n < int64(len(seqs)) {
				return fmt.Errorf("%d of the %d SEQs given are not dead messages (no such row, or pending, delivered, redriven or discarded already: see txbox dead list)",
					int64(len(seqs))-n, len(seqs))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "act on every dead message")
	return cmd
}
