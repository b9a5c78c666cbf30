// Package health serves a txbox process's probes and metrics over HTTP: a
// mountable http.Handler with /healthz (the process is alive), /readyz (it
// can deliver: for a relay, its database answers, its broker connection is
// up and a round succeeded recently) and /metrics (any handler, e.g.
// promhttp's with package txboxprom's metrics). It imports no metrics SDK.
//
//	h := health.Handler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), health.RelayCheck("relay", func() *relay.Relay { return r }))
//	go http.ListenAndServe("127.0.0.1:9090", h)
//
// /readyz answers 200 when every check passes and 503 otherwise, with a
// JSON body naming each check, its error and its details (for a relay: the
// listener state, the last good round).
package health

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/txbox/txbox/relay"
)

// DefaultCheckTimeout bounds one /readyz request's checks.
const DefaultCheckTimeout = 2 * time.Second

// Result is one check's answer.
type Result struct {
	Name   string `json:"name"`
	Ready  bool   `json:"ready"`
	Error  string `json:"error,omitempty"`
	Detail any    `json:"detail,omitempty"`
}

// Check answers whether one part of the process is ready; it must respect
// ctx's deadline.
type Check func(ctx context.Context) Result

// RelayCheck checks the relay current returns (nil: no relay runs now,
// which is not ready; the CLI builds its relay anew when the broker
// connection closes for good). It reads the relay's Stats and answers
// with Stats.Ready.
func RelayCheck(name string, current func() *relay.Relay) Check {
	return func(ctx context.Context) Result {
		r := current()
		if r == nil {
			return Result{Name: name, Error: "no relay is running"}
		}
		st, _ := r.Stats(ctx) // a table that cannot be read is in st.Ready
		res := Result{Name: name, Ready: true, Detail: relayDetail(st)}
		if err := st.Ready(); err != nil {
			res.Ready, res.Error = false, err.Error()
		}
		return res
	}
}

type relayHealth struct {
	Running         bool    `json:"running"`
	DatabaseOK      bool    `json:"database_ok"`
	BrokerConnected bool    `json:"broker_connected"`
	LastGoodRound   string  `json:"last_good_round,omitempty"`
	LastGoodAgo     float64 `json:"last_good_round_seconds_ago,omitempty"`
	Listener        string  `json:"listener"` // "notify", "polling" (notify lost) or "poll-only"
}

func relayDetail(h relay.Stats) relayHealth {
	d := relayHealth{Running: h.Running, DatabaseOK: h.DatabaseErr == nil, BrokerConnected: h.BrokerConnected, Listener: "poll-only"}
	if !h.LastGoodRound.IsZero() {
		d.LastGoodRound = h.LastGoodRound.UTC().Format(time.RFC3339Nano)
		d.LastGoodAgo = h.At.Sub(h.LastGoodRound).Seconds()
	}
	switch {
	case h.Listening:
		d.Listener = "notify"
	case h.Notify:
		d.Listener = "polling"
	}
	return d
}

// Handler serves /healthz, /readyz (the checks, run on each request, at
// most DefaultCheckTimeout) and, when metrics is not nil, /metrics.
func Handler(metrics http.Handler, checks ...Check) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), DefaultCheckTimeout)
		defer cancel()
		body := struct {
			Ready  bool     `json:"ready"`
			Checks []Result `json:"checks"`
		}{Ready: true, Checks: []Result{}}
		for _, c := range checks {
			r := c(ctx)
			body.Ready = body.Ready && r.Ready
			body.Checks = append(body.Checks, r)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !body.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(body)
	})
	return mux
}
