package txboxui

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/printable"
)

// StoreRef is one store (an outbox database) of a Stores dashboard.
type StoreRef struct {
	// Name names the store in the list and in ?store=NAME.
	Name string
	// Open returns the store's dashboard, made with Stores.New, or why
	// there is none now (its database is not open yet: the list shows the
	// error, the store's page answers 503 with it). It is called on every
	// request that needs it; cache the Handler.
	Open func() (*Handler, error)
}

// StoresConfig configures a Stores dashboard.
type StoresConfig struct {
	// Title heads the list. Default: "txbox".
	Title string
	// Stores returns the stores listed now, in order (the list may change
	// between calls).
	Stores func() []StoreRef
	// Token and AllowedHosts are as in Config, for every store: Stores.New
	// sets them on each store's Config.
	Token        string
	AllowedHosts []string
	// Timeout bounds the reading of one store's backlog for the list.
	// Default: DefaultTimeout.
	Timeout time.Duration
	// Logger: default slog.Default().
	Logger *slog.Logger
}

// Stores is the dashboard of several stores: at / the list of the stores
// with their backlogs, at /store/N/ the dashboard of the N-th (from 0),
// with its relay, inbox and dead-letter panels; /?store=NAME redirects
// there. One token, Host and CSRF check covers them all. It is safe for
// concurrent use.
type Stores struct {
	cfg  StoresConfig
	csrf string
	mux  *http.ServeMux
}

// NewStores returns the dashboard of the stores cfg.Stores lists.
func NewStores(cfg StoresConfig) (*Stores, error) {
	if cfg.Stores == nil {
		return nil, fmt.Errorf("%w: txboxui: StoresConfig.Stores is nil", txbox.ErrInvalidConfig)
	}
	if err := checkAccess(cfg.Token, cfg.AllowedHosts); err != nil {
		return nil, err
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: txboxui: Timeout must not be negative", txbox.ErrInvalidConfig)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Title == "" {
		cfg.Title = "txbox"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Stores{cfg: cfg, csrf: randomToken(), mux: http.NewServeMux()}
	static, _ := fs.Sub(assets, "assets")
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /{$}", s.serveIndex)
	s.mux.HandleFunc("/store/", s.serveStore)
	return s, nil
}

// New returns the dashboard of one store of s: cfg with s's Token and
// AllowedHosts, sharing s's CSRF token (one cookie serves every store).
func (s *Stores) New(cfg Config) (*Handler, error) {
	cfg.Token, cfg.AllowedHosts = s.cfg.Token, s.cfg.AllowedHosts
	h, err := New(cfg)
	if err != nil {
		return nil, err
	}
	h.csrf, h.parent = s.csrf, s
	return h, nil
}

// ServeHTTP serves the list and the stores' dashboards.
func (s *Stores) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !guard(w, r, s.cfg.Token, s.cfg.AllowedHosts) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

var errNoSuchStore = errors.New("no such store")

// open returns the i-th store's dashboard.
func (s *Stores) open(stores []StoreRef, i int) (*Handler, error) {
	if i < 0 || i >= len(stores) {
		return nil, errNoSuchStore
	}
	h, err := stores[i].Open()
	if err != nil {
		return nil, err
	}
	if h == nil || h.parent != s {
		return nil, fmt.Errorf("txboxui: the dashboard of store %q was not made by this Stores' New", stores[i].Name)
	}
	return h, nil
}

func (s *Stores) serveStore(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/store/")
	num, _, slash := strings.Cut(rest, "/")
	stores := s.cfg.Stores()
	i, err := strconv.Atoi(num)
	if err != nil || strconv.Itoa(i) != num || i < 0 || i >= len(stores) {
		http.NotFound(w, r)
		return
	}
	if !slash {
		seeOther(w, num+"/")
		return
	}
	h, err := s.open(stores, i)
	if err != nil {
		http.Error(w, "txbox dashboard: store "+strconv.Quote(stores[i].Name)+" is not available: "+printable.Text(err.Error()), http.StatusServiceUnavailable)
		return
	}
	http.StripPrefix("/store/"+num, h.mux).ServeHTTP(w, r)
}

// storeRow is one store of the list.
type storeRow struct {
	I                               int
	Name                            string
	Pending, Retrying, Parked, Dead int64
	OldestClaimableSec              float64
	Err                             string
}

// serveIndex lists the stores with their backlogs, read now (each within
// Timeout; a store whose database does not answer says so), or redirects
// ?store=NAME to the store's dashboard.
func (s *Stores) serveIndex(w http.ResponseWriter, r *http.Request) {
	stores := s.cfg.Stores()
	if name, ok := r.URL.Query()["store"]; ok {
		for i, st := range stores {
			if len(name) == 1 && st.Name == name[0] {
				seeOther(w, "store/"+strconv.Itoa(i)+"/")
				return
			}
		}
		http.Error(w, "txbox dashboard: no such store", http.StatusNotFound)
		return
	}
	rows := make([]storeRow, 0, len(stores))
	for i, st := range stores {
		row := storeRow{I: i, Name: st.Name}
		h, err := s.open(stores, i)
		var b Backlog
		if err == nil && h.cfg.Backlog == nil {
			err = errors.New("no backlog source")
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
			b, err = h.cfg.Backlog(ctx)
			cancel()
		}
		if err != nil {
			row.Err = err.Error()
			if errors.Is(err, context.DeadlineExceeded) {
				row.Err = "timed out"
			}
		} else {
			row.Pending, row.Retrying, row.Parked, row.Dead = b.Pending, b.Retrying, b.Parked, b.Dead
			row.OldestClaimableSec = b.OldestClaimableAge.Seconds()
		}
		rows = append(rows, row)
	}
	(&Handler{log: s.cfg.Logger}).render(w, "stores.html", struct {
		Title  string
		Stores []storeRow
	}{s.cfg.Title, rows})
}
