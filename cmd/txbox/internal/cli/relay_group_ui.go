package cli

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/printable"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxui"
)

// storesUI is the dashboard of `txbox relay --ui` with several stores: a
// list of the stores with their backlogs at /ui/, and each store's own
// dashboard (package txboxui) at /ui/store/N/, N its place in the list;
// /ui/?store=NAME redirects there.
type storesUI struct {
	token  string
	log    *slog.Logger
	h      *relayHTTP
	starts *storeStarts

	mu     sync.Mutex
	stores []storeUI
}

type storeUI struct {
	spec    storeSpec
	backlog txboxui.BacklogFunc
	ui      *txboxui.Handler // nil until the store's database is open
}

// mountGroupUI serves the dashboards of the group's stores under /ui/.
// They read their figures when watched only (no background sampling, which
// would cost every store's database a query every few seconds). A store's
// dashboard is made once its database is open.
func (h *relayHTTP) mountGroupUI(log *slog.Logger, specs []storeSpec, starts *storeStarts, token string) {
	s := &storesUI{token: token, log: log, h: h, starts: starts}
	for _, sp := range specs {
		s.stores = append(s.stores, storeUI{spec: sp})
	}
	h.groupUI = s
	h.ui.Store(&uiMount{s})
	log.Info("serving the dashboard", "url", "http://"+h.srv.Addr+"/ui/", "stores", len(specs))
}

var errNoSuchStore = errors.New("no such store")

// names returns the names of the stores listed, in order.
func (s *storesUI) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, len(s.stores))
	for i, st := range s.stores {
		names[i] = st.spec.Name
	}
	return names
}

// setSpecs sets the stores listed (after a reload of --stores), keeping
// the dashboards of the stores that did not change.
func (s *storesUI) setSpecs(specs []storeSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stores := make([]storeUI, len(specs))
	for i, sp := range specs {
		stores[i] = storeUI{spec: sp}
		for _, old := range s.stores {
			if sameStore(old.spec, sp) {
				stores[i] = old
			}
		}
	}
	s.stores = stores
}

// store returns the i-th store's dashboard, made now if its database has
// just opened, or why there is none yet.
func (s *storesUI) store(i int) (storeUI, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.stores) {
		return storeUI{}, errNoSuchStore
	}
	st := s.stores[i]
	if st.ui != nil {
		return st, nil
	}
	db := s.starts.db(st.spec)
	if db == nil {
		return st, cmp.Or(s.starts.wait(st.spec.Name), errNotOpenYet)
	}
	cfg, err := db.uiConfig(st.spec.Schema, cmp.Or(st.spec.Table, txbox.DefaultTable), nil)
	if err != nil {
		return st, err
	}
	name := st.spec.Name
	cfg.Title, cfg.Token, cfg.AllowedHosts, cfg.Logger = name, s.token, s.h.allowed, s.log.With("store", name)
	cfg.Relays = []txboxui.RelayRef{{Name: name, Current: func() *relay.Relay { return s.h.relayOf(name) }}}
	if st.ui, err = txboxui.New(cfg); err != nil {
		return st, err
	}
	st.backlog = cfg.Backlog
	s.stores[i] = st
	return st, nil
}

// authenticated is txboxui's rule: with a token, every request carries it
// as the basic-auth password or a bearer token.
func (s *storesUI) authenticated(r *http.Request) bool {
	if s.token == "" {
		return true
	}
	if _, pw, ok := r.BasicAuth(); ok && subtle.ConstantTimeCompare([]byte(pw), []byte(s.token)) == 1 {
		return true
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(bearer), []byte(s.token)) == 1
}

func (s *storesUI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authenticated(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="txbox", charset="UTF-8"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/store/"); ok {
		num, _, slash := strings.Cut(rest, "/")
		i, err := strconv.Atoi(num)
		if err != nil || i < 0 || i >= len(s.names()) || strconv.Itoa(i) != num {
			http.NotFound(w, r)
			return
		}
		if !slash {
			seeOther(w, num+"/")
			return
		}
		st, err := s.store(i)
		if errors.Is(err, errNoSuchStore) {
			http.NotFound(w, r)
			return
		}
		if err != nil {
			http.Error(w, fmt.Sprintf("store %q does not run: %s", st.spec.Name, printable.Text(redactErr(err, st.spec.target.url).Error())), http.StatusServiceUnavailable)
			return
		}
		http.StripPrefix("/store/"+num, st.ui).ServeHTTP(w, r)
		return
	}
	if r.URL.Path != "/" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	if name, ok := r.URL.Query()["store"]; ok {
		for i, st := range s.names() {
			if len(name) == 1 && st == name[0] {
				seeOther(w, "store/"+strconv.Itoa(i)+"/")
				return
			}
		}
		http.Error(w, "no such store", http.StatusNotFound)
		return
	}
	s.serveIndex(w, r)
}

func seeOther(w http.ResponseWriter, loc string) {
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusSeeOther)
}

type storeRow struct {
	I                               int
	Name                            string
	Pending, Retrying, Parked, Dead int64
	OldestClaimable                 string
	Err                             string
}

// storesPage shows store names (from --db flags or the --stores file) and
// errors with what is not printable escaped (package printable), as the
// dashboard does: a bidi override cannot reorder the list.
var storesPage = template.Must(template.New("stores").Funcs(template.FuncMap{"vis": printable.Cell, "vistext": printable.Text}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>txbox relay: {{len .}} stores</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}td:first-child,th:first-child{text-align:left}.err{color:#b00;text-align:left}</style>
</head><body>
<h1>txbox relay: {{len .}} stores</h1>
<table id="stores">
<tr><th>store</th><th>pending</th><th>retrying</th><th>parked</th><th>dead</th><th>oldest claimable</th></tr>
{{range .}}<tr class="store" data-name="{{vis .Name}}"><td><a href="store/{{.I}}/">{{vis .Name}}</a></td>
{{if .Err}}<td class="err" colspan="5">unavailable: {{vistext .Err}}</td>{{else}}<td class="pending">{{.Pending}}</td><td>{{.Retrying}}</td><td>{{.Parked}}</td><td class="dead">{{.Dead}}</td><td>{{.OldestClaimable}}</td>{{end}}</tr>
{{end}}</table>
</body></html>
`))

// serveIndex lists the stores with their backlogs, read now (each at most
// a few seconds; a store whose database does not answer says so).
func (s *storesUI) serveIndex(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	names := s.names()
	rows := make([]storeRow, 0, len(names))
	for i := range names {
		st, err := s.store(i)
		if errors.Is(err, errNoSuchStore) {
			break // the list changed meanwhile
		}
		row := storeRow{I: i, Name: st.spec.Name}
		var b txboxui.Backlog
		if err == nil {
			one, cancel := context.WithTimeout(ctx, 2*time.Second)
			b, err = st.backlog(one)
			cancel()
		}
		if err != nil {
			row.Err = redactErr(err, st.spec.target.url).Error()
		} else {
			row.Pending, row.Retrying, row.Parked, row.Dead = b.Pending, b.Retrying, b.Parked, b.Dead
			row.OldestClaimable = b.OldestClaimableAge.Round(time.Second).String()
		}
		rows = append(rows, row)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	_ = storesPage.Execute(w, rows)
}
