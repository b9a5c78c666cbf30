package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
)

// claimCheckFlags name the claim check tables.
type claimCheckFlags struct {
	tableFlags
	tables []string
}

func newClaimCheckCmd() *cobra.Command {
	var f claimCheckFlags
	cmd := &cobra.Command{
		Use:   "claimcheck",
		Short: "Sweep the payloads stored by claim checks",
		Long: `  txbox claimcheck sweep    delete the stored payloads past retention

--claim-check-table names the claim check tables (as migrate up
--claim-check-table created them; repeat or comma-separate for several), in
--schema; --table the outbox table whose messages refer to their payloads.
See docs/guide/claim-check.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.register(cmd, true)
	cmd.PersistentFlags().StringSliceVar(&f.tables, "claim-check-table", []string{claimcheck.DefaultTable},
		"the claim check tables (repeat or comma-separate for several)")
	cmd.AddCommand(newClaimCheckSweepCmd(&f))
	return cmd
}

func newClaimCheckSweepCmd(f *claimCheckFlags) *cobra.Command {
	retention := claimcheck.DefaultRetention
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Delete the stored payloads both sides are done with",
		Long: `Delete the payloads of the claim check tables that both sides are done with,
in batches, as claimcheck.Store.Sweep and the relay's cleanup
(txbox relay --claim-check-table) do: a payload is kept while a row of the
outbox table (--table) that refers to it is still to deliver or dead, and
for --retention once a sweep found its message delivered. A message whose
payload was swept is dead-lettered when a consumer receives it, so
--retention must exceed the longest time a consumer may take to handle a
delivered message (broker redelivery and replay, a consumer that is down).`,
		Example: `  txbox claimcheck sweep --retention 168h
  txbox claimcheck sweep --db postgres://app@db/app --claim-check-table big_payloads`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if retention < time.Second {
				return fmt.Errorf("%w: --retention %s: want 1s or more", txbox.ErrInvalidConfig, retention)
			}
			if len(f.tables) == 0 {
				return errors.New("give the claim check table: --claim-check-table NAME")
			}
			db, err := f.tableFlags.open(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			type tableCount struct {
				Table string `json:"table"`
				Count int64  `json:"count"`
			}
			var total int64
			counts := []tableCount{}
			out := cmd.OutOrStdout()
			for _, table := range f.tables {
				cfg := claimcheck.Config{Schema: f.schema, Table: table, OutboxTables: []string{f.table}}
				st, err := db.claimCheck(cfg)
				if err != nil {
					return fmt.Errorf("--claim-check-table %s: %w", table, err)
				}
				n, err := st.Sweep(cmd.Context(), retention)
				total += n
				counts = append(counts, tableCount{table, n})
				if !asJSON {
					prefix := ""
					if len(f.tables) > 1 {
						prefix = cell(table) + ": "
					}
					fmt.Fprintf(out, "%sswept %d payload(s)\n", prefix, n)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", table, err)
				}
			}
			if asJSON {
				return writeJSON(out, struct {
					Count  int64        `json:"count"`
					Tables []tableCount `json:"tables"`
				}{total, counts})
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&retention, "retention", retention, "keep a stored payload this long once its message was delivered")
	fl.BoolVar(&asJSON, "json", false, "print a JSON object")
	return cmd
}
