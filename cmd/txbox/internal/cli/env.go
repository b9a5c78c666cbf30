package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/txbox/txbox"
)

// The relay's environment variables. Every variable of txbox has the
// prefix TXBOX_. A flag given on the command line wins over its variable.
const (
	EnvPollInterval   = "TXBOX_POLL_INTERVAL"
	EnvBatchSize      = "TXBOX_BATCH_SIZE"
	EnvRetention      = "TXBOX_RETENTION"
	EnvMaxAttempts    = "TXBOX_MAX_ATTEMPTS"
	EnvPublishTimeout = "TXBOX_PUBLISH_TIMEOUT"
	EnvTable          = "TXBOX_TABLE"
	EnvSchema         = "TXBOX_SCHEMA"
	// EnvTaskRetention is asynq's retention of completed tasks (the window
	// in which a re-enqueue of the same task id is dropped).
	EnvTaskRetention = "TXBOX_TASK_RETENTION"
)

// settingEnv are the variables their commands read themselves when they
// resolve a setting (settings.go).
var settingEnv = []string{EnvPollInterval, EnvBatchSize, EnvRetention, EnvMaxAttempts, EnvPublishTimeout,
	EnvTable, EnvSchema, EnvTaskRetention}

// lookupEnv returns the value of the variable name when set and not
// empty; from is name.
func lookupEnv(name string) (value, from string, ok bool) {
	if v, set := os.LookupEnv(name); set && v != "" {
		return v, name, true
	}
	return "", name, false
}

// taskRetentionFromEnv returns TXBOX_TASK_RETENTION, or 0 when unset.
func taskRetentionFromEnv() (time.Duration, error) {
	v, from, ok := lookupEnv(EnvTaskRetention)
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 24h", from, v)
	}
	return d, nil
}

// noEnv are the flags no variable sets: those that choose what one
// invocation acts on, or confirm or force it. A stray TXBOX_ALL, TXBOX_YES
// or TXBOX_TOPIC must never widen or narrow a redrive or discard.
var noEnv = map[string]bool{
	"help": true, "all": true, "yes": true, "force": true, "dry-run": true,
	"id": true, "after": true, "topic": true, "key": true, "error": true, "since": true,
	"min-attempts": true, "source": true, "to": true, "from": true, "down": true,
}

// envOverride names the variable of a flag whose generic name another
// command's flag of the same name, meaning something else, already has.
var envOverride = map[string]string{
	"ui --token":                   EnvUIToken,
	"relay --ui-token":             EnvUIToken,
	"inbox sweep --retention":      "TXBOX_INBOX_RETENTION",       // not the relay's TXBOX_RETENTION
	"claimcheck sweep --retention": "TXBOX_CLAIM_CHECK_RETENTION", // the relay's --claim-check-retention
	"inbox sweep --batch-size":     "TXBOX_INBOX_BATCH_SIZE",      // not the relay's TXBOX_BATCH_SIZE
	"stats --interval":             "TXBOX_WATCH_INTERVAL",        // not the relay's TXBOX_STATS_INTERVAL
	"ui --interval":                "TXBOX_UI_INTERVAL",
	"demo --timeout":               "TXBOX_DEMO_TIMEOUT",
	"health --timeout":             "TXBOX_HEALTH_TIMEOUT",
	"demo --dir":                   "TXBOX_DEMO_DIR",
	"pending list --scheduled":     "TXBOX_PENDING_SCHEDULED", // not bench's TXBOX_SCHEDULED (a row count)
}

// ownEnv are the variables whose commands read them themselves (as the
// flags' defaults, or when they resolve a setting); applyEnv leaves their
// flags alone.
var ownEnv = map[string]bool{EnvDB: true, EnvBroker: true, EnvStream: true, EnvStreamSubjects: true, EnvSubjectPrefix: true,
	EnvExchange: true, EnvCloudEventsSource: true, EnvUIToken: true}

func init() {
	for _, name := range settingEnv {
		ownEnv[name] = true
	}
}

// flagEnv is the variable of the flag name of the command at path (its
// path below "txbox "): TXBOX_ and the flag's name in upper case, "-" as
// "_", unless envOverride says otherwise; "" for the flags of noEnv.
func flagEnv(path, name string) string {
	if noEnv[name] {
		return ""
	}
	for p := path; ; {
		if v, ok := envOverride[p+" --"+name]; ok {
			return v
		}
		i := strings.LastIndexByte(p, ' ')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return "TXBOX_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// commandPath is cmd's path below the root ("dead redrive").
func commandPath(cmd *cobra.Command) string {
	_, p, _ := strings.Cut(cmd.CommandPath(), " ")
	return p
}

// flagOwner is the command that defines the flag cmd sees as name: cmd, or
// the parent whose persistent flag it inherits.
func flagOwner(cmd *cobra.Command, name string) *cobra.Command {
	for c := cmd; c != nil; c = c.Parent() {
		if c.LocalNonPersistentFlags().Lookup(name) != nil || c.PersistentFlags().Lookup(name) != nil {
			return c
		}
	}
	return cmd
}

// nameEnv adds "(env NAME)" to the usage of every flag of the tree under
// cmd that has a variable and does not name it yet.
func nameEnv(cmd *cobra.Command) {
	add := func(fs *pflag.FlagSet) {
		fs.VisitAll(func(f *pflag.Flag) {
			if name := flagEnv(commandPath(cmd), f.Name); name != "" && !strings.Contains(f.Usage, "env "+name) {
				f.Usage += " (env " + name + ")"
			}
		})
	}
	add(cmd.LocalNonPersistentFlags())
	add(cmd.PersistentFlags())
	for _, c := range cmd.Commands() {
		nameEnv(c)
	}
}

// applyEnv gives every flag of cmd that the command line did not set the
// value of its variable, when that is set and not empty. The flag still
// counts as not given (Changed is false). Variables of ownEnv are left to
// their commands.
func applyEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		name := flagEnv(commandPath(flagOwner(cmd, f.Name)), f.Name)
		if name == "" || f.Changed || ownEnv[name] {
			return
		}
		raw, from, ok := lookupEnv(name)
		if !ok {
			return
		}
		if err := f.Value.Set(raw); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s=%q (the variable of --%s): %v", txbox.ErrInvalidConfig, from, raw, f.Name, err))
		}
	})
	return errors.Join(errs...)
}
