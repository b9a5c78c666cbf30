package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
)

// inboxSweeper is what the inbox commands use of an Inbox, whatever its
// transaction type.
type inboxSweeper interface {
	Stats(ctx context.Context) ([]inbox.SourceStats, error)
	SweepWith(ctx context.Context, o inbox.SweepOptions) (int64, error)
}

// inboxFlags name the inbox tables: --inbox-table, a list, as on migrate,
// ui and relay.
type inboxFlags struct {
	tableFlags
	inboxTables []string
}

// namedInbox is one inbox table of the flags.
type namedInbox struct {
	table string
	ib    inboxSweeper
}

func (f *inboxFlags) open(cmd *cobra.Command) ([]namedInbox, func(), error) {
	if len(f.inboxTables) == 0 {
		return nil, nil, errors.New("give the inbox table: --inbox-table NAME (repeat or comma-separate for several)")
	}
	db, err := f.tableFlags.open(cmd.Context())
	if err != nil {
		return nil, nil, err
	}
	var out []namedInbox
	for _, table := range f.inboxTables {
		// The CLI reports what it swept itself: no audit log lines.
		cfg := inbox.Config{Schema: f.schema, Table: table, Hook: func(context.Context, inbox.Event) {}, Logger: slog.New(slog.DiscardHandler)}
		var ib inboxSweeper
		if db.pgx != nil {
			ib, err = inbox.New[pgx.Tx](db.pgx, cfg)
		} else {
			ib, err = inbox.New[*sql.Tx](db.sql, cfg)
		}
		if err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("--inbox-table %s: %w", table, err)
		}
		out = append(out, namedInbox{table, ib})
	}
	return out, db.Close, nil
}

func newInboxCmd() *cobra.Command {
	var f inboxFlags
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "Count and sweep inbox tables' receipts",
		Long: `  txbox inbox stats    receipts per source: total, processed, pending
  txbox inbox sweep    delete the receipts past retention (--dry-run counts them)

--inbox-table names the inbox tables (as migrate up --inbox-table created
them; repeat or comma-separate for several), in --schema.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.noTable = true // no outbox table here
	f.register(cmd, true)
	cmd.PersistentFlags().StringSliceVar(&f.inboxTables, "inbox-table", nil, "the inbox tables (required; repeat or comma-separate for several)")
	cmd.AddCommand(newInboxStatsCmd(&f), newInboxSweepCmd(&f))
	return cmd
}

type sourceJSON struct {
	Table     string `json:"table"`
	Source    string `json:"source"`
	Total     int64  `json:"total"`
	Processed int64  `json:"processed"`
	Pending   int64  `json:"pending"`
}

func newInboxStatsCmd(f *inboxFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count the receipts of each source (scans the table)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ibs, closeDB, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer closeDB()
			js := []sourceJSON{}
			for _, n := range ibs {
				st, err := n.ib.Stats(cmd.Context())
				if err != nil {
					return fmt.Errorf("%s: %w", n.table, err)
				}
				for _, s := range st {
					js = append(js, sourceJSON{Table: n.table, Source: s.Source, Total: s.Total, Processed: s.Processed, Pending: s.Pending})
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, js)
			}
			if len(js) == 0 {
				fmt.Fprintln(out, "no receipts")
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			several := len(ibs) > 1
			if several {
				fmt.Fprint(tw, "INBOX TABLE\t")
			}
			fmt.Fprintln(tw, "SOURCE\tTOTAL\tPROCESSED\tPENDING")
			for _, s := range js {
				if several {
					fmt.Fprintf(tw, "%s\t", cell(s.Table))
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", cell(s.Source), s.Total, s.Processed, s.Pending)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print a JSON array of {"table", "source", "total", "processed", "pending"}`)
	return cmd
}

// inboxRetentionSetting bounds inbox sweep --retention.
var inboxRetentionSetting = setting[time.Duration]{flag: "retention", min: time.Second}

func newInboxSweepCmd(f *inboxFlags) *cobra.Command {
	var o inbox.SweepOptions
	var asJSON bool
	var every time.Duration
	o.Retention = inbox.DefaultRetention
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Delete the receipts past retention",
		Long: `Delete the receipts of the inbox table received more than --retention ago
(unprocessed ones: twice --retention), in batches, as inbox.Inbox.Sweep does.
Within retention a redelivered message is a duplicate; after it a replay runs
its handler again, so --retention must exceed the longest time a broker may
redeliver. --dry-run counts what would be deleted and deletes nothing.`,
		Example: `  txbox inbox sweep --inbox-table orders_inbox --retention 720h --dry-run
  txbox inbox sweep --inbox-table orders_inbox --source billing`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := inboxRetentionSetting.validate(o.Retention); err != nil {
				return err
			}
			if o.BatchSize < 1 {
				return fmt.Errorf("%w: --batch-size %d: want 1 or more", txbox.ErrInvalidConfig, o.BatchSize)
			}
			if every < 0 {
				return fmt.Errorf("%w: --progress %s: want 0 or more", txbox.ErrInvalidConfig, every)
			}
			ibs, closeDB, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer closeDB()
			if !o.DryRun {
				// A progress line on standard error at most every --progress.
				last := time.Now()
				o.Progress = func(deleted int64) {
					if now := time.Now(); now.Sub(last) >= every {
						last = now
						fmt.Fprintf(cmd.ErrOrStderr(), "sweeping: %d receipt(s) deleted so far\n", deleted)
					}
				}
			}
			type tableCount struct {
				Table string `json:"table"`
				Count int64  `json:"count"`
			}
			var total int64
			counts := []tableCount{}
			out := cmd.OutOrStdout()
			for _, ni := range ibs {
				n, err := ni.ib.SweepWith(cmd.Context(), o)
				total += n
				counts = append(counts, tableCount{ni.table, n})
				prefix := ""
				if len(ibs) > 1 {
					prefix = cell(ni.table) + ": "
				}
				switch {
				case asJSON:
				case o.DryRun && err == nil:
					fmt.Fprintf(out, "%swould sweep %d receipt(s)\n", prefix, n)
				case !o.DryRun:
					fmt.Fprintf(out, "%sswept %d receipt(s)\n", prefix, n)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", ni.table, err)
				}
			}
			if asJSON {
				return writeJSON(out, struct {
					DryRun bool         `json:"dry_run"`
					Count  int64        `json:"count"`
					Tables []tableCount `json:"tables"`
				}{o.DryRun, total, counts})
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Source, "source", "", "sweep the receipts of this source only")
	fl.DurationVar(&o.Retention, "retention", o.Retention, "keep processed receipts this long, unprocessed ones twice as long")
	fl.BoolVar(&o.DryRun, "dry-run", false, "count what would be swept, delete nothing")
	fl.BoolVar(&asJSON, "json", false, "print a JSON object")
	fl.IntVar(&o.BatchSize, "batch-size", inbox.DefaultSweepBatchSize, "receipts deleted per statement")
	fl.DurationVar(&every, "progress", 2*time.Second, "how often to print a progress line (to standard error) while it sweeps; 0: after every batch")
	return cmd
}
