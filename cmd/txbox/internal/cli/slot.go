package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// slotFlags name the replication slot and publication of the log-based
// relay (relay --cdc, txbox slot).
type slotFlags struct {
	slot        string
	publication string
}

func (s *slotFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.slot, "slot", "", "PostgreSQL logical replication slot of the log-based relay; default: the outbox table's name with _cdc (txbox_outbox_cdc)")
	fs.StringVar(&s.publication, "publication", "", "PostgreSQL publication of the outbox table's inserts; default: the slot's name")
}

func (s *slotFlags) config(t *tableFlags) cdc.Config {
	return cdc.Config{Schema: t.schema, Table: t.table, Slot: s.slot, Publication: s.publication}
}

func newSlotCmd() *cobra.Command {
	var f tableFlags
	var s slotFlags
	cmd := &cobra.Command{
		Use:   "slot",
		Short: "Show, create or drop the replication slot of the log-based relay (PostgreSQL)",
		Long: `The log-based relay (txbox relay --cdc) reads the outbox table's inserts from
PostgreSQL's write-ahead log through a logical replication slot and a
publication, one of each per outbox table (docs/guide/cdc.md).

  txbox slot status   the slot's confirmed LSN, lag, wal_status, safe_wal_size
                      (exit 1 when the slot is missing, lost or invalidated)
  txbox slot create   create the publication and the slot where missing
  txbox slot drop     drop them: the server keeps no more WAL for the relay

The server needs wal_level = logical; create needs a role with REPLICATION that
owns the outbox table.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.register(cmd, true)
	s.register(cmd.PersistentFlags())
	open := func(cmd *cobra.Command) (*database, error) {
		t, err := f.target()
		if err != nil {
			return nil, err
		}
		if t.dialect != txboxdriver.Postgres {
			return nil, fmt.Errorf("%w: --db is %s: replication slots are PostgreSQL's", txbox.ErrInvalidConfig, t.dialect)
		}
		return openTarget(cmd.Context(), t, mustExist)
	}
	// withSlot runs do on the slot of --db, prints what it returns, and
	// then check's verdict on it.
	withSlot := func(do func(context.Context, *pgxpool.Pool, cdc.Config) (*cdc.SlotStatus, error), check func(*cdc.SlotStatus) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			db, err := open(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			st, err := do(cmd.Context(), db.pool, s.config(&f))
			if err != nil {
				return err
			}
			printSlot(cmd, st)
			return check(st)
		}
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the slot and publication; exit 1 when the slot is missing or lost",
		Args:  cobra.NoArgs,
		RunE: withSlot(cdc.Status, func(st *cdc.SlotStatus) error {
			switch {
			case !st.Exists:
				return fmt.Errorf("%w: slot %s does not exist: txbox slot create", cdc.ErrSlotMissing, st.Slot)
			case st.Lost() != "":
				return fmt.Errorf("%w: slot %s is %s (docs/guide/cdc.md, A lost slot)", cdc.ErrSlotLost, st.Slot, st.Lost())
			}
			return nil
		}),
	}
	create := &cobra.Command{
		Use:   "create",
		Short: "Create the publication and the slot where missing (the slot starts at the current WAL position)",
		Args:  cobra.NoArgs,
		RunE:  withSlot(cdc.CreateSlot, func(*cdc.SlotStatus) error { return nil }),
	}
	var yes bool
	drop := &cobra.Command{
		Use:   "drop",
		Short: "Drop the slot and the publication (needs --yes); the relay must be stopped",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !yes {
				return fmt.Errorf("%w: slot drop forgets what the log-based relay confirmed: rows committed since are no longer read from the log; pass --yes", txbox.ErrInvalidConfig)
			}
			db, err := open(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			cfg := s.config(&f)
			if err := cdc.DropSlot(cmd.Context(), db.pool, cfg); err != nil {
				return err
			}
			slot, pub, _ := cfg.SlotNames()
			fmt.Fprintf(cmd.OutOrStdout(), "dropped slot %s and publication %s\n", slot, pub)
			return nil
		},
	}
	drop.Flags().BoolVar(&yes, "yes", false, "confirm the drop")
	cmd.AddCommand(status, create, drop)
	return cmd
}

func printSlot(cmd *cobra.Command, st *cdc.SlotStatus) {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	defer tw.Flush()
	yesNo := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(tw, "slot\t%s\n", st.Slot)
	fmt.Fprintf(tw, "publication\t%s (publishes the outbox table: %s)\n", st.Publication, yesNo(st.PublicationExists))
	if !st.Exists {
		fmt.Fprintf(tw, "exists\tno\n")
		return
	}
	active := yesNo(st.Active)
	if st.Active {
		active += fmt.Sprintf(" (pid %d)", st.ActivePID)
	}
	fmt.Fprintf(tw, "plugin\t%s\n", st.Plugin)
	fmt.Fprintf(tw, "active\t%s\n", active)
	fmt.Fprintf(tw, "confirmed_flush_lsn\t%s\n", st.ConfirmedFlushLSN)
	fmt.Fprintf(tw, "restart_lsn\t%s\n", st.RestartLSN)
	fmt.Fprintf(tw, "lag\t%s (%d bytes)\n", humanize.IBytes(uint64(max(st.LagBytes, 0))), st.LagBytes)
	flushLag := "unknown (no reader, or caught up and idle)"
	if st.FlushLagSeconds >= 0 {
		flushLag = fmt.Sprintf("%.3fs", st.FlushLagSeconds)
	}
	fmt.Fprintf(tw, "flush_lag\t%s\n", flushLag)
	fmt.Fprintf(tw, "wal_status\t%s\n", st.WALStatus)
	safe := "unbounded (max_slot_wal_keep_size = -1)"
	if st.SafeWALSize >= 0 {
		safe = humanize.IBytes(uint64(st.SafeWALSize))
	}
	fmt.Fprintf(tw, "safe_wal_size\t%s\n", safe)
	if st.Invalidation != "" {
		fmt.Fprintf(tw, "invalidated\t%s\n", st.Invalidation)
	}
}
