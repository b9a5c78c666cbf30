package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/health"
)

var healthTimeoutSetting = setting[time.Duration]{flag: "timeout", min: 100 * time.Millisecond, max: time.Minute}

// errNotReady is health's answer when the probe said no: exit 1, with the
// reasons printed.
var errNotReady = errors.New("not ready")

func newHealthCmd() *cobra.Command {
	var addr string
	var live bool
	timeout := 5 * time.Second
	cmd := &cobra.Command{
		Use:   "health --http ADDR",
		Short: "Ask a running relay's /readyz (or /healthz) and exit 0 when it answers 200",
		Long: `Ask the probes of a txbox process started with --http ADDR (txbox relay, or a
service serving package health's handler): /readyz, or /healthz with --live.
Exit status 0 when it answers 200, 1 otherwise (not ready, not answering). It
prints "ready", or "not ready:" and each failing check with its reason.

It is the container health check that needs no curl or wget in the image
(distroless, scratch):

  HEALTHCHECK CMD ["txbox", "health", "--http", "127.0.0.1:9090"]`,
		Example: `  txbox health --http 127.0.0.1:9090
  txbox health --http 127.0.0.1:9090 --live
  txbox health --http http://relay.internal:9090 --timeout 2s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := healthTimeoutSetting.validate(timeout); err != nil {
				return err
			}
			if addr == "" {
				return fmt.Errorf("%w: give --http, the address the process serves its probes on (its own --http)", txbox.ErrInvalidConfig)
			}
			base := addr
			if !strings.Contains(base, "://") {
				base = "http://" + base
			}
			path, yes := "/readyz", "ready"
			if live {
				path, yes = "/healthz", "alive"
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return probe(ctx, cmd.OutOrStdout(), strings.TrimSuffix(base, "/")+path, yes)
		},
	}
	cmd.Flags().StringVar(&addr, "http", "", "the address of the process's probes: host:port, or an http:// URL (required)")
	cmd.Flags().BoolVar(&live, "live", false, "ask /healthz (the process is alive) instead of /readyz (it can deliver)")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long to wait for the answer (100ms to 1m)")
	return cmd
}

// probe GETs url and prints yes on 200 and returns nil; otherwise it
// returns errNotReady with the reasons.
func probe(ctx context.Context, out io.Writer, url, yes string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%w: --http: %w", txbox.ErrInvalidConfig, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: no answer: %w", errNotReady, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var ready struct {
		Checks []health.Result `json:"checks"`
	}
	_ = json.Unmarshal(body, &ready) // /healthz answers text
	if resp.StatusCode == http.StatusOK {
		fmt.Fprintln(out, yes)
		return nil
	}
	var why []string
	for _, c := range ready.Checks {
		if !c.Ready {
			why = append(why, fmt.Sprintf("%s: %s", c.Name, c.Error))
		}
	}
	if len(why) == 0 {
		why = append(why, resp.Status)
	}
	return fmt.Errorf("%w: %s", errNotReady, strings.Join(why, "; "))
}
