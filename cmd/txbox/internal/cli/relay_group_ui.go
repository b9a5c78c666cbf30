package cli

import (
	"cmp"
	"context"
	"crypto/subtle"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxui"
)

// storesUI is the dashboard of `txbox relay --ui` with several stores: a
// list of the stores with their backlogs at /ui/, and each store's own
// dashboard (package txboxui) at /ui/store/N/, N its place in the list;
// /ui/?store=NAME redirects there.
type storesUI struct {
	token  string
	stores []storeUI
}

type storeUI struct {
	name    string
	url     string // the database's, to redact from errors
	backlog txboxui.BacklogFunc
	ui      *txboxui.Handler
}

// mountGroupUI serves the dashboards of the group's stores under /ui/.
// They read their figures when watched only (no background sampling, which
// would cost every store's database a query every few seconds).
func (h *relayHTTP) mountGroupUI(log *slog.Logger, specs []storeSpec, dbs map[string]*database, token string) error {
	s := &storesUI{token: token}
	for _, sp := range specs {
		db := dbs[dbKey(sp.target)]
		cfg, err := db.uiConfig(sp.Schema, cmp.Or(sp.Table, txbox.DefaultTable), nil)
		if err != nil {
			return err
		}
		cfg.Title, cfg.Token, cfg.Logger = sp.Name, token, log.With("store", sp.Name)
		cfg.Relays = []txboxui.RelayRef{{Name: sp.Name, Current: h.group[sp.Name].Load}}
		ui, err := txboxui.New(cfg)
		if err != nil {
			return err
		}
		s.stores = append(s.stores, storeUI{name: sp.Name, url: sp.target.url, backlog: cfg.Backlog, ui: ui})
	}
	h.ui.Store(&uiMount{s})
	log.Info("serving the dashboard", "url", "http://"+h.srv.Addr+"/ui/", "stores", len(specs))
	return nil
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
		if err != nil || i < 0 || i >= len(s.stores) || strconv.Itoa(i) != num {
			http.NotFound(w, r)
			return
		}
		if !slash {
			seeOther(w, num+"/")
			return
		}
		http.StripPrefix("/store/"+num, s.stores[i].ui).ServeHTTP(w, r)
		return
	}
	if r.URL.Path != "/" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	if name, ok := r.URL.Query()["store"]; ok {
		for i, st := range s.stores {
			if len(name) == 1 && st.name == name[0] {
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

var storesPage = template.Must(template.New("stores").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>txbox relay: {{len .}} stores</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}td:first-child,th:first-child{text-align:left}.err{color:#b00;text-align:left}</style>
</head><body>
<h1>txbox relay: {{len .}} stores</h1>
<table id="stores">
<tr><th>store</th><th>pending</th><th>retrying</th><th>parked</th><th>dead</th><th>oldest claimable</th></tr>
{{range .}}<tr class="store" data-name="{{.Name}}"><td><a href="store/{{.I}}/">{{.Name}}</a></td>
{{if .Err}}<td class="err" colspan="5">unavailable: {{.Err}}</td>{{else}}<td class="pending">{{.Pending}}</td><td>{{.Retrying}}</td><td>{{.Parked}}</td><td class="dead">{{.Dead}}</td><td>{{.OldestClaimable}}</td>{{end}}</tr>
{{end}}</table>
</body></html>
`))

// serveIndex lists the stores with their backlogs, read now (each at most
// a few seconds; a store whose database does not answer says so).
func (s *storesUI) serveIndex(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	rows := make([]storeRow, len(s.stores))
	for i, st := range s.stores {
		row := storeRow{I: i, Name: st.name}
		one, cancel := context.WithTimeout(ctx, 2*time.Second)
		b, err := st.backlog(one)
		cancel()
		if err != nil {
			row.Err = redactErr(err, st.url).Error()
		} else {
			row.Pending, row.Retrying, row.Parked, row.Dead = b.Pending, b.Retrying, b.Parked, b.Dead
			row.OldestClaimable = b.OldestClaimableAge.Round(time.Second).String()
		}
		rows[i] = row
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	_ = storesPage.Execute(w, rows)
}
