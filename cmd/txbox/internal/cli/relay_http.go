package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxprom"
	"github.com/txbox/txbox/txboxui"
)

// relayHTTP is what `txbox relay --http` serves: the relay's metrics and
// probes, for the relay running now (the command builds a new one when the
// broker connection closes for good).
type relayHTTP struct {
	metrics *txboxprom.Metrics
	current atomic.Pointer[relay.Relay]
	ui      atomic.Pointer[txboxui.Handler] // --ui, once the database is open
	srv     *http.Server
}

// serveRelayHTTP listens on addr and serves in the background; addr ""
// serves nothing (a nil *relayHTTP, whose methods do nothing). An address
// that is not loopback is refused unless public.
func serveRelayHTTP(ctx context.Context, log *slog.Logger, addr string, public bool) (*relayHTTP, error) {
	if addr == "" {
		return nil, nil
	}
	if err := checkLoopback(addr, public); err != nil {
		return nil, err
	}
	h := &relayHTTP{metrics: txboxprom.New(txboxprom.Config{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/", health.Handler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), health.RelayCheck("relay", h.current.Load)))
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		ui := h.ui.Load()
		if ui == nil {
			http.Error(w, "the dashboard is not served (txbox relay --ui), or the database is not open yet", http.StatusServiceUnavailable)
			return
		}
		http.StripPrefix("/ui", ui).ServeHTTP(w, r)
	})
	handler := mux
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
// relay running now.
func (h *relayHTTP) mountUI(ctx context.Context, log *slog.Logger, db *database, schema, table, token string) error {
	cfg, err := db.uiConfig(schema, table, nil)
	if err != nil {
		return err
	}
	cfg.Token, cfg.Logger = token, log
	cfg.Relays = []txboxui.RelayRef{{Name: "relay", Current: h.current.Load}}
	ui, err := txboxui.New(cfg)
	if err != nil {
		return err
	}
	go ui.Run(ctx)
	h.ui.Store(ui)
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

func (h *relayHTTP) close() {
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
}
