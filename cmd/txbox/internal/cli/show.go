package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/txbox/txbox/inspect"
)

// foundJSON is one row of txbox show --json.
type foundJSON struct {
	messageJSON
	PublishedAt *time.Time `json:"published_at"`
	ParkedBy    int64      `json:"parked_by,omitempty"`
	Why         string     `json:"why"`
}

// why says where a found row stands and what to do about it.
func why(f inspect.Found) string {
	switch f.State {
	case inspect.Pending:
		return "never tried yet: a running relay publishes it at its next round"
	case inspect.Scheduled:
		return fmt.Sprintf("scheduled: due at %s, not published before (txbox pending cancel %s discards it until then)", timeCell(f.NextAttemptAt), cell(f.ID))
	case inspect.Retrying:
		return fmt.Sprintf("the broker rejected it %d time(s) (last error below); the relay tries it again from %s", f.Attempts, timeCell(f.NextAttemptAt))
	case inspect.Parked:
		if f.ParkedBy > 0 {
			return fmt.Sprintf("waits behind dead message SEQ %d of its key: redrive or discard that one (txbox dead show %d)", f.ParkedBy, f.ParkedBy)
		}
		return "waits behind a dead message of its key (txbox dead list --key …)"
	case inspect.Dead:
		return fmt.Sprintf("the broker rejected it %d time(s) (last error below); the relay no longer tries it: txbox dead redrive %d (or discard %d)", f.Attempts, f.Seq, f.Seq)
	case inspect.Delivered:
		return "delivered at " + timeCell(f.PublishedAt) + "; the row is kept until the relay's --retention removes it"
	}
	return ""
}

func newShowCmd() *cobra.Command {
	var f tableFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID|SEQ",
		Short: "Find one outbox message by message id or SEQ, in any state, and say why it is there",
		Long: `Find the outbox rows whose message id is ID, or whose SEQ (row id) is SEQ, in
any state: pending, scheduled, retrying, parked (behind a dead message of its key), dead,
or delivered (while the relay's --retention keeps delivered rows). For each it
prints where it stands and why, its attempts, times, last error, headers and
payload (escaped, cut at 4 KiB).

A message the consumer gave up on is on the broker, not in this table: see
txbox dlq list --id ID.`,
		Example: `  txbox show order-41 --db postgres://app@localhost:5432/app
  txbox show 812 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, closeDB, err := openInspector(cmd, &f)
			if err != nil {
				return err
			}
			defer closeDB()
			found, err := in.Find(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if len(found) == 0 {
				return fmt.Errorf("no row of outbox table %s has message id or SEQ %q: never written, delivered and removed since (relay --retention), or discarded", f.table, args[0])
			}
			out := cmd.OutOrStdout()
			if asJSON {
				js := make([]foundJSON, len(found))
				for i, m := range found {
					j := foundJSON{messageJSON: messageJSON{rowJSON: toRowJSON(m.Row), Headers: m.Headers, Payload: m.Payload},
						PublishedAt: timeOrNil(m.PublishedAt), ParkedBy: m.ParkedBy, Why: why(m)}
					if j.Headers == nil {
						j.Headers = map[string]string{}
					}
					js[i] = j
				}
				return writeJSON(out, js)
			}
			for i, m := range found {
				if i > 0 {
					fmt.Fprintln(out)
				}
				printFound(out, m)
			}
			return nil
		},
	}
	f.register(cmd, false)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of the rows found (payload base64-encoded)")
	return cmd
}

func printFound(out io.Writer, m inspect.Found) {
	_ = printMessage(out, m.Message, why(m), m.PublishedAt, payloadClip)
}

// printMessage prints one outbox message: its fields (why, when not
// empty, after its state; publishedAt when not zero), its headers and its
// payload, escaped, clipped to clipAt bytes when clipAt > 0.
func printMessage(out io.Writer, m inspect.Message, why string, publishedAt time.Time, clipAt int) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "seq\t%d\n", m.Seq)
	fmt.Fprintf(tw, "message id\t%s\n", cell(m.ID))
	fmt.Fprintf(tw, "topic\t%s\n", cell(m.Topic))
	fmt.Fprintf(tw, "key\t%s\n", cell(m.Key))
	fmt.Fprintf(tw, "state\t%s\n", m.State)
	if why != "" {
		fmt.Fprintf(tw, "why\t%s\n", why)
	}
	fmt.Fprintf(tw, "attempts\t%d\n", m.Attempts)
	fmt.Fprintf(tw, "created at\t%s (%s ago)\n", m.CreatedAt.UTC().Format(time.RFC3339Nano), age(m.Age))
	if !m.NextAttemptAt.IsZero() {
		fmt.Fprintf(tw, "next attempt\t%s\n", m.NextAttemptAt.UTC().Format(time.RFC3339Nano))
	}
	if !m.DeadAt.IsZero() {
		fmt.Fprintf(tw, "dead since\t%s\n", m.DeadAt.UTC().Format(time.RFC3339Nano))
	}
	if !publishedAt.IsZero() {
		fmt.Fprintf(tw, "published at\t%s\n", publishedAt.UTC().Format(time.RFC3339Nano))
	}
	if m.State != inspect.Dead && m.Attempts == 0 && m.LastError != "" {
		// A redrive keeps the error (pending, then delivered); the next
		// failed attempt replaces it.
		fmt.Fprintf(tw, "previous error\t%s (before a redrive; not an error of its current attempts)\n", cell(m.LastError))
	} else {
		fmt.Fprintf(tw, "last error\t%s\n", cell(m.LastError))
	}
	if m.Invalid != "" {
		fmt.Fprintf(tw, "invalid\t%s\n", cell(m.Invalid))
		fmt.Fprintf(tw, "raw headers\t%s\n", cell(m.RawHeaders))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "headers (%d):\n", len(m.Headers))
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		fmt.Fprintf(out, "  %s: %s\n", cell(k), cell(m.Headers[k]))
	}
	payload := string(m.Payload)
	if clipAt > 0 {
		payload = clip(payload, clipAt)
	}
	_, err := fmt.Fprintf(out, "payload (%d bytes):\n%s\n", len(m.Payload), text(payload))
	return err
}
