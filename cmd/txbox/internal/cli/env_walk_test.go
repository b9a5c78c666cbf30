package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestEveryFlagHasItsVariable walks the whole command tree: every flag but
// those of noEnv names its variable in --help, and setting that variable
// (alone) gives the flag its value, for every command, except the
// variables the commands read themselves (ownEnv, checked by
// env_test.go). No two flags that mean different things share a
// variable.
func TestEveryFlagHasItsVariable(t *testing.T) {
	type flagAt struct{ path, name, env, typ, usage string }
	var all []flagAt
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(fs *pflag.FlagSet) {
			fs.VisitAll(func(f *pflag.Flag) {
				all = append(all, flagAt{commandPath(c), f.Name, flagEnv(commandPath(c), f.Name), f.Value.Type(), f.Usage})
			})
		}
		add(c.LocalNonPersistentFlags())
		add(c.PersistentFlags())
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(NewRoot(io.Discard, io.Discard))
	if len(all) < 150 {
		t.Fatalf("walked %d flags: the tree is not all there", len(all))
	}
	meaning := map[string]string{} // variable -> the usage of the first flag with it
	checked := 0
	for _, f := range all {
		if f.env == "" {
			if !noEnv[f.name] {
				t.Errorf("txbox %s --%s has no variable", f.path, f.name)
			}
			continue
		}
		if !strings.Contains(f.usage, "env "+f.env) {
			t.Errorf("txbox %s --%s: its help does not name %s: %q", f.path, f.name, f.env, f.usage)
		}
		if u, ok := meaning[f.env]; ok && u != f.usage && !sameMeaning(f.env) {
			t.Errorf("%s is the variable of flags that mean different things: %q and txbox %s --%s %q", f.env, u, f.path, f.name, f.usage)
		} else if !ok {
			meaning[f.env] = f.usage
		}
		if ownEnv[f.env] {
			continue
		}
		sample, want := map[string][2]string{
			"bool": {"true", "true"}, "int": {"7", "7"}, "duration": {"7s", "7s"}, "float64": {"7.5", "7.5"},
			"stringSlice": {"a7,b7", "[a7,b7]"}, "intSlice": {"3,5", "[3,5]"},
		}[f.typ][0], map[string][2]string{
			"bool": {"true", "true"}, "int": {"7", "7"}, "duration": {"7s", "7s"}, "float64": {"7.5", "7.5"},
			"stringSlice": {"a7,b7", "[a7,b7]"}, "intSlice": {"3,5", "[3,5]"},
		}[f.typ][1]
		if sample == "" {
			sample, want = "x7", "x7"
		}
		t.Run(strings.ReplaceAll(f.path+" --"+f.name, " ", "_"), func(t *testing.T) {
			t.Setenv(f.env, sample)
			root := NewRoot(io.Discard, io.Discard)
			c, _, err := root.Find(strings.Fields(f.path))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.ParseFlags(nil); err != nil {
				t.Fatal(err)
			}
			if err := applyEnv(c); err != nil {
				t.Fatalf("%s=%s: %v", f.env, sample, err)
			}
			fl := c.Flags().Lookup(f.name)
			if got := fl.Value.String(); got != want {
				t.Errorf("%s=%s: txbox %s --%s is %q, want %q", f.env, sample, f.path, f.name, got, want)
			}
			if fl.Changed {
				t.Errorf("txbox %s --%s counts as given on the command line once read from %s", f.path, f.name, f.env)
			}
		})
		checked++
	}
	if checked < 80 {
		t.Fatalf("checked %d variables by setting them, want most flags", checked)
	}
}

// sameMeaning: variables that flags of several commands share with the
// same meaning, whose usages are worded for their command.
func sameMeaning(env string) bool {
	switch env {
	case EnvDB, EnvBroker, "TXBOX_JSON", "TXBOX_HTTP", "TXBOX_LIMIT", "TXBOX_LOG_LEVEL", "TXBOX_LOG_JSON", "TXBOX_INBOX_TABLE", "TXBOX_CLAIM_CHECK_TABLE", "TXBOX_CLAIM_CHECK_RETENTION",
		"TXBOX_DEAD_LETTER_PREFIX", "TXBOX_DEAD_LETTER_SUFFIX", "TXBOX_BINDING", "TXBOX_ALLOWED_HOST", "TXBOX_PROGRESS",
		"TXBOX_RAW", "TXBOX_SCHEMA", "TXBOX_TABLE", "TXBOX_RETENTION", "TXBOX_BATCH_SIZE", "TXBOX_NO_OUTBOX", "TXBOX_LOCK_TIMEOUT", "TXBOX_LOCK_RETRIES",
		"TXBOX_READ_ONLY", "TXBOX_DLQ_BINDING", "TXBOX_RELAY", "TXBOX_UI_TOKEN", "TXBOX_STREAM", "TXBOX_WATCH", "TXBOX_COUNT":
		return true
	}
	return false
}
