// Package cli holds the commands of the txbox program (cmd/txbox). Each
// command writes to the io.Writers it is given and honours the context it
// runs with, so tests run every command in-process.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/txbox/txbox/cmd/txbox/internal/demo"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// Environment variables read by the CLI, besides the relay's ones (env.go).
const (
	EnvDB             = "TXBOX_DB"
	EnvBroker         = "TXBOX_BROKER"
	EnvStream         = "TXBOX_STREAM"
	EnvStreamSubjects = "TXBOX_STREAM_SUBJECTS"
	EnvSubjectPrefix  = "TXBOX_SUBJECT_PREFIX"
)

// DefaultDB is the database used when neither --db nor TXBOX_DB is set.
const DefaultDB = "sqlite://txbox.db"

// Main runs the txbox program with args (without the program name) and
// returns its exit code: 0 on success, 1 on any error, which it prints to
// stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if err := Run(ctx, args, stdout, stderr); err != nil {
		// Errors from txbox's packages start with "txbox: " already, also
		// when a command wrapped them ("migrate up on …: txbox: …"): the
		// line says it once. Run redacted the message; text escapes what
		// could reach the terminal.
		msg := strings.ReplaceAll(strings.TrimPrefix(err.Error(), "txbox: "), ": txbox: ", ": ")
		fmt.Fprintf(stderr, "txbox: error: %s\n", text(msg))
		if txboxpgx.IsMissingTable(err) || txboxsql.IsMissingTable(err) {
			fmt.Fprintln(stderr, "txbox: hint: the table (or its schema) does not exist: create it with `txbox migrate up` and the same --db, --schema and --table (--inbox-table for an inbox), or check those flags")
		}
		return 1
	}
	return 0
}

// Run runs the txbox program with args and returns its error. Neither
// what it writes nor its error's message holds a password found in args,
// in the URLs of the environment or in a URL-like text (see redact).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	r := &redactor{}
	r.add(args...)
	r.add(os.Getenv(EnvDB), os.Getenv(EnvBroker))
	root := newRoot(r, stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		return &redactedError{msg: r.redact(err.Error()), err: err}
	}
	return nil
}

// NewRoot builds the txbox command tree writing to stdout and stderr, with
// the passwords of the flags' values masked in what it writes (its errors
// are not redacted: Run does that).
func NewRoot(stdout, stderr io.Writer) *cobra.Command { return newRoot(&redactor{}, stdout, stderr) }

func newRoot(r *redactor, stdout, stderr io.Writer) *cobra.Command {
	tty := isTerminal(stdout)
	stdout, stderr = r.writer(stdout), r.writer(stderr)
	root := &cobra.Command{
		Use:   "txbox",
		Short: "Transactional outbox and inbox for Go: migrate, relay, demo",
		Long: `txbox delivers the events a service writes into its database, in the same
transaction as its business change, to a message broker: at least once, and
only if the transaction committed.

Run "txbox demo" to see it work with no setup (SQLite and an embedded NATS
server). Run "txbox migrate up" then "txbox relay" for real use. Databases and
brokers are chosen by URL (--db, --broker or TXBOX_DB, TXBOX_BROKER); relay
settings also come from the TXBOX_* environment variables. See docs/reference/cli.md.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			err := applyEnv(cmd)
			cmd.Flags().VisitAll(func(fl *pflag.Flag) { r.add(fl.Value.String()) })
			return err
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see %q)", err, c.CommandPath()+" --help")
	})
	root.AddCommand(newMigrateCmd(), newRelayCmd(), newDeadCmd(), newDLQCmd(), newShowCmd(), newStatsCmd(tty), newPendingCmd(), newInboxCmd(), newClaimCheckCmd(), newUICmd(),
		demo.Command(), newBenchCmd(), newHealthCmd(), newSlotCmd(), newVersionCmd())
	nameEnv(root)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print txbox's version",
		Long: `Print the version of the txbox module this program was built from ("dev" for
a build from a work tree), with the Go version and platform.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "txbox %s (%s %s/%s)\n", Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// Version is the txbox module's version from the build information, or
// "dev" when there is none (a build from a work tree).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	if bi.Main.Path != "github.com/txbox/txbox" {
		for _, d := range bi.Deps {
			if d.Path == "github.com/txbox/txbox" {
				v = d.Version
			}
		}
	}
	if v == "" || v == "(devel)" {
		return "dev"
	}
	return v
}

// envOr returns the environment variable name if set and not empty, else def.
func envOr(name, def string) string {
	if v, _, ok := lookupEnv(name); ok {
		return v
	}
	return def
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
