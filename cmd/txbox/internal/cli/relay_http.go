package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/internal/hostcheck"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/supervise"
	"github.com/txbox/txbox/txboxprom"
	"github.com/txbox/txbox/txboxui"
)

// relayHTTP is what `txbox relay --http` serves: the relay's metrics and
// probes, for the relay running now (the command builds a new one when the
// broker connection closes for good); with several stores, each store's.
type relayHTTP struct {
	metrics *txboxprom.Metrics // one store
	current atomic.Pointer[relay.Relay]

	stores *txboxprom.Stores                    // several stores
	sup    atomic.Pointer[supervise.Supervisor] // their relays, and why those not running do not

	groupUI *storesUI // --ui with several stores

	metricsHandler http.Handler
	probes         atomic.Pointer[http.Handler] // /metrics, /healthz, /readyz with a check per store of now

	mu    sync.Mutex
	names []string // the stores, in order

	ui      atomic.Pointer[uiMount] // --ui, once the databases are open
	allowed []string                // --allowed-host
	srv     *http.Server
}

type uiMount struct{ h http.Handler }

// serveRelayHTTP listens on addr and serves in the background (the
// dashboard under /ui/ if ui, once mounted); addr ""
// serves nothing (a nil *relayHTTP, whose methods do nothing). An address
// that is not loopback is refused unless public. On a loopback address,
// every request (probes, metrics, dashboard) whose Host header is not
// loopback nor one of allowed is refused: a page rebound to 127.0.0.1 reads
// nothing. With stores (the names of a group's stores) it serves each
// store's metrics, labelled store=NAME, and one readiness check per store,
// named after it.
func serveRelayHTTP(ctx context.Context, log *slog.Logger, addr string, public, ui bool, stores, allowed []string) (*relayHTTP, error) {
	if addr == "" {
		return nil, nil
	}
	if err := checkLoopback(addr, public); err != nil {
		return nil, err
	}
	if err := hostcheck.Validate("--allowed-host", allowed); err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	h := &relayHTTP{allowed: allowed}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h.metricsHandler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if stores == nil {
		h.metrics = txboxprom.New(txboxprom.Config{})
		reg.MustRegister(h.metrics)
		probes := health.Handler(h.metricsHandler, health.RelayCheck("relay", h.current.Load))
		h.probes.Store(&probes)
	} else {
		h.stores = txboxprom.NewStores(txboxprom.StoresConfig{})
		reg.MustRegister(h.stores)
		for _, state := range []supervise.State{supervise.Running, supervise.Waiting, supervise.LeftOut} {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "txbox_relay_stores", ConstLabels: prometheus.Labels{"state": state.String()},
				Help: "The stores of a relay with several, by state: running (in the group), waiting (for their database, or to be migrated), left_out (until a restart or a reload of --stores).",
			}, func() float64 { return float64(h.storeStates()[state]) }))
		}
		h.setNames(stores)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		(*h.probes.Load()).ServeHTTP(w, r)
	})
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		if !ui {
			http.Error(w, "the dashboard is not served: start the relay with --ui", http.StatusNotFound)
			return
		}
		m := h.ui.Load()
		if m == nil {
			http.Error(w, "the dashboard is not served yet: the database is not open", http.StatusServiceUnavailable)
			return
		}
		http.StripPrefix("/ui", m.h).ServeHTTP(w, r)
	})
	var handler http.Handler = mux
	if checkLoopback(addr, false) == nil {
		handler = hostcheck.Handler(mux, allowed, "open it by a loopback address, or allow the name with --allowed-host")
	} else if len(allowed) > 0 {
		log.Warn("--allowed-host has no effect: --http is not a loopback address, so no Host is checked (the dashboard needs its token)", "http", addr)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	h.srv = &http.Server{Addr: ln.Addr().String(), Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("--http server stopped", "err", err)
		}
	}()
	log.Info("serving /metrics, /healthz and /readyz", "addr", "http://"+ln.Addr().String())
	return h, nil
}

// checkLoopback refuses a listen address that is not loopback (an empty
// host listens on every interface) unless public.
func checkLoopback(addr string, public bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: --http %q: %v", txbox.ErrInvalidConfig, addr, err)
	}
	if public {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: --http %q is not a loopback address: metrics and probes would be reachable from the network; pass --http-public to allow it", txbox.ErrInvalidConfig, addr)
}

// mountUI serves the dashboard of the relay's table under /ui/, with the
// relay running now (publishing as publisher says: brokerFlags.mode) and
// the inbox tables named.
func (h *relayHTTP) mountUI(ctx context.Context, log *slog.Logger, db *database, schema, table, token string, tables uiTables, publisher string) error {
	cfg, err := db.uiConfig(schema, table, tables)
	if err != nil {
		return err
	}
	cfg.Token, cfg.AllowedHosts, cfg.Logger = token, h.allowed, log
	cfg.Relays = []txboxui.RelayRef{{Name: "relay", Current: h.current.Load, Publisher: publisher}}
	ui, err := txboxui.New(cfg)
	if err != nil {
		return err
	}
	go ui.Run(ctx)
	h.ui.Store(&uiMount{ui})
	log.Info("serving the dashboard", "url", "http://"+h.srv.Addr+"/ui/")
	return nil
}

func (h *relayHTTP) observer() txbox.RelayObserver {
	if h == nil {
		return nil
	}
	return h.metrics.Relay()
}

func (h *relayHTTP) set(r *relay.Relay) {
	if h != nil {
		h.current.Store(r)
	}
}

// storeObserver returns the observer of a group's store: its metrics.
func (h *relayHTTP) storeObserver(name string) txbox.RelayObserver {
	if h == nil {
		return nil
	}
	return h.stores.Relay(name)
}

// relayOf returns the relay of the named store running now, or nil.
func (h *relayHTTP) relayOf(name string) *relay.Relay {
	if sup := h.sup.Load(); sup != nil {
		return sup.Relay(name)
	}
	return nil
}

// setNames sets the group's stores (after a reload of --stores): a store
// no longer named loses its relay, its readiness check and its series.
func (h *relayHTTP) setNames(names []string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, old := range h.names {
		if !slices.Contains(names, old) {
			h.stores.Remove(old)
		}
	}
	h.names = slices.Clone(names)
	probes := health.Handler(h.metricsHandler, h.storeChecks(h.names)...)
	h.probes.Store(&probes)
}

// storeStates counts the group's stores by state.
func (h *relayHTTP) storeStates() map[supervise.State]int {
	n := map[supervise.State]int{}
	if sup := h.sup.Load(); sup != nil {
		for _, st := range sup.States() {
			n[st.State]++
		}
	}
	return n
}

// reloaded sets the group's stores after a reload of --stores.
func (h *relayHTTP) reloaded(specs []storeSpec) {
	if h == nil {
		return
	}
	names := make([]string, len(specs))
	for i, sp := range specs {
		names[i] = sp.Name
	}
	h.setNames(names)
	if h.groupUI != nil {
		h.groupUI.setSpecs(specs)
	}
}

// storeChecks returns one readiness check per store of names: its relay's,
// or why it does not run.
func (h *relayHTTP) storeChecks(names []string) []health.Check {
	checks := make([]health.Check, len(names))
	for i, name := range names {
		current := func() *relay.Relay { return h.relayOf(name) }
		check := health.RelayCheck(name, current)
		checks[i] = func(ctx context.Context) health.Result {
			if current() == nil {
				if err := h.why(name); err != nil {
					return health.Result{Name: name, Error: err.Error()}
				}
			}
			return check(ctx)
		}
	}
	return checks
}

// setSupervisor gives the probes and metrics of a group's stores their
// relays, and why a store does not run yet.
func (h *relayHTTP) setSupervisor(s *supervise.Supervisor) {
	if h != nil {
		h.sup.Store(s)
	}
}

// why returns why the named store does not run, or nil.
func (h *relayHTTP) why(name string) error {
	sup := h.sup.Load()
	if sup == nil {
		return supervise.ErrNotOpenYet
	}
	for _, st := range sup.States() {
		if st.Store.Name == name {
			return st.Err
		}
	}
	return nil
}

func (h *relayHTTP) close() {
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}
