package txboxui

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/internal/printable"
)

//go:embed assets
var assets embed.FS

var page = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"age": age,
	"ago": ago,
	"until": func(t time.Time) string {
		if d := time.Until(t); d > 0 {
			return age(d.Seconds())
		}
		return "due"
	},
	"rate":      rate,
	"spark":     spark,
	"sparkLast": sparkLast,
	"when":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	// vis and vistext show text read from the database (topics, keys,
	// ids, errors, sources) with what is not printable escaped: a bidi
	// override cannot reorder the page around it.
	"vis":     printable.Cell,
	"vistext": printable.Text,
	// more tells that a value of the lists was cut: an ellipsis and its
	// full length, or "".
	"more": func(shown string, full int64) string {
		if full <= int64(len(shown)) {
			return ""
		}
		return "… (" + strconv.FormatInt(full, 10) + " bytes)"
	},
}).ParseFS(assets, "assets/page.html", "assets/letter.html", "assets/dlq.html", "assets/stores.html"))

// csrfCookie is the cookie that must match the form's token.
const (
	csrfCookie = "txboxui_csrf"
	csrfField  = "csrf"
	csrfHeader = "X-Txbox-Csrf"
)

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (h *Handler) routes() {
	h.mux = http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	h.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET /{$}", h.servePage)
	h.mux.HandleFunc("GET /api/state", h.serveState)
	h.mux.HandleFunc("GET /dead/{seq}", h.serveLetter)
	h.mux.HandleFunc("POST /dead/{action}", h.serveAction)
	h.mux.HandleFunc("POST /api/dead/{action}", h.serveAction)
	h.mux.HandleFunc("POST /dead/bulk", h.serveBulk)
	h.mux.HandleFunc("POST /scheduled/cancel", h.serveCancel)
	h.mux.HandleFunc("GET /dlq", h.serveDLQ)
	h.mux.HandleFunc("GET /dlq/show", h.serveDLQLetter)
	h.mux.HandleFunc("POST /dlq/{action}", h.serveDLQAction)
}

// authenticated: no token is configured, or the request carries it.
func authenticated(r *http.Request, token string) bool {
	if token == "" {
		return true
	}
	_, pass, ok := r.BasicAuth()
	if !ok {
		pass, ok = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	return ok && subtle.ConstantTimeCompare([]byte(pass), []byte(token)) == 1
}

// view is what the page template renders.
type view struct {
	*State
	CSRF    string
	Done    string // the result of the last action, from the redirect
	Failed  bool
	CanEdit bool
	// CanCancel: the scheduled messages have Cancel buttons.
	CanCancel bool
	DLQ       bool // the consumer dead letters' panel is configured
	InStores  bool // one store of a Stores dashboard: link to the list
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	s := h.state(r.Context(), false)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: h.csrf, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	v := view{State: s, CSRF: h.csrf, CanEdit: !h.cfg.ReadOnly && s.HasDead && h.mayMutate(r) == nil, CanCancel: h.mayCancel(r) == nil,
		DLQ: len(h.cfg.DLQ) > 0, InStores: h.parent != nil}
	q := r.URL.Query()
	if q.Get("done") == "cancel" {
		v.Done = "Cancelled the scheduled message: it is discarded."
		if why, ok := cancelRefusals[q.Get("not")]; ok {
			v.Done, v.Failed = "Not cancelled: "+why+".", true
		}
	}
	if a := q.Get("done"); a == "redrive" || a == "discard" {
		n, _ := strconv.ParseInt(q.Get("n"), 10, 64)
		verb := map[string]string{"redrive": "Redrove", "discard": "Discarded"}[a]
		v.Done = fmt.Sprintf("%s %d dead message(s).", verb, n)
		if missed, _ := strconv.ParseInt(q.Get("missed"), 10, 64); missed > 0 {
			v.Done += fmt.Sprintf(" %d of the messages asked for were no longer dead (redriven, discarded or delivered meanwhile).", missed)
			v.Failed = n == 0
		}
		if refused, _ := strconv.ParseInt(q.Get("refused"), 10, 64); refused > 0 {
			v.Done += fmt.Sprintf(" The database refused %d of them, which stay dead (see the server's log or txbox dead %s SEQ...).", refused, a)
			v.Failed = true
		}
	}
	if q.Get("failed") != "" {
		v.Done, v.Failed = "The action failed; see the server's log.", true
	}
	name := "page.html"
	if q.Get("fragment") == "1" {
		name = "main"
	}
	var buf bytes.Buffer
	if err := page.ExecuteTemplate(&buf, name, v); err != nil {
		h.log.Error("txboxui: render", "err", err)
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// letterView is what the page of one dead message renders.
type letterView struct {
	Title             string
	CSRF              string
	CanEdit           bool
	Seq               int64
	Attempts          int
	CreatedAt, DeadAt time.Time
	Fields            []letterField
	Cap               int
}

// letterField is one value of a dead message, cut to ValueCap bytes.
type letterField struct {
	Name  string
	Value string
	Bytes int  // the full length
	Cut   bool // Value is shorter than Bytes
}

func newField(name, v string) letterField {
	shown := strings.Clone(clip(v, ValueCap)) // not the whole value behind it
	return letterField{Name: name, Value: shown, Bytes: len(v), Cut: len(shown) < len(v)}
}

// serveLetter shows one dead message: each value whole, up to ValueCap
// bytes, with its headers and payload.
func (h *Handler) serveLetter(w http.ResponseWriter, r *http.Request) {
	if a := r.PathValue("seq"); a == "redrive" || a == "discard" {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "txbox dashboard: "+a+" is a POST action", http.StatusMethodNotAllowed)
		return
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq <= 0 {
		http.Error(w, "txbox dashboard: "+strconv.Quote(r.PathValue("seq"))+" is not a seq", http.StatusNotFound)
		return
	}
	if h.cfg.Dead == nil {
		http.Error(w, "txbox dashboard: no dead-letter source is configured", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	m, err := h.cfg.Dead.Get(ctx, seq)
	if errors.Is(err, dead.ErrNotFound) {
		http.Error(w, fmt.Sprintf("txbox dashboard: no dead message %d (redriven, discarded or delivered meanwhile?)", seq), http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, "txbox dashboard: "+printable.Text(h.failed(fmt.Sprintf("read dead message %d", seq), err)), http.StatusInternalServerError)
		return
	}
	v := letterView{Title: h.cfg.Title, CSRF: h.csrf, CanEdit: h.mayMutate(r) == nil, Seq: m.Seq, Attempts: m.Attempts, CreatedAt: m.CreatedAt, DeadAt: m.DeadAt, Cap: ValueCap,
		Fields: []letterField{newField("message id", m.ID), newField("topic", m.Topic), newField("key", m.Key), newField("last error", m.LastError),
			newField("headers", m.Headers), newField("payload", string(m.Payload))}}
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: h.csrf, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	var buf bytes.Buffer
	if err := page.ExecuteTemplate(&buf, "letter.html", v); err != nil {
		h.log.Error("txboxui: render", "err", err)
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

func (h *Handler) serveState(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.state(r.Context(), false))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// mayMutate says why r may not redrive or discard, or nil.
func (h *Handler) mayMutate(r *http.Request) error {
	if err := h.mayAct(r); err != nil {
		return err
	}
	if h.cfg.Dead == nil {
		return errors.New("no dead-letter source is configured")
	}
	return nil
}

// mayCancel says why r may not cancel a scheduled message, or nil.
func (h *Handler) mayCancel(r *http.Request) error {
	if err := h.mayAct(r); err != nil {
		return err
	}
	if h.cfg.Cancel == nil {
		return errors.New("no cancel is configured")
	}
	return nil
}

// cancelRefusals are why a cancel discarded nothing, by the code the
// redirect carries (not the error's text: the page shows only these).
var cancelRefusals = map[string]string{
	"delivered": "the message was already delivered",
	"dead":      "the message is dead (discard it from the dead messages)",
	"inflight":  "a relay is delivering the message now",
	"notfound":  "no such message (delivered and deleted, or cancelled already)",
}

// serveCancel cancels the scheduled message whose message id is the
// form's id (Config.Cancel), and shows the result on the page.
func (h *Handler) serveCancel(w http.ResponseWriter, r *http.Request) {
	if !h.admit(w, r, h.mayCancel, true, plainFail(w)) {
		return
	}
	id := r.PostFormValue("id")
	if id == "" {
		http.Error(w, "txbox dashboard: give the message id to cancel (form field id)", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	n, err := h.cfg.Cancel(ctx, id)
	h.state(r.Context(), true) // show the result at once
	var not string
	switch {
	case err == nil:
		h.log.Info("txboxui: cancel", "id", printable.Text(id), "rows", n, "remote", r.RemoteAddr)
		seeOther(w, "../?done=cancel")
		return
	case errors.Is(err, txbox.ErrDelivered):
		not = "delivered"
	case errors.Is(err, txbox.ErrMessageDead):
		not = "dead"
	case errors.Is(err, txbox.ErrInFlight):
		not = "inflight"
	case errors.Is(err, txbox.ErrMessageNotFound):
		not = "notfound"
	default:
		h.log.Error("txboxui: cancel failed", "id", printable.Text(id), "err", err)
		seeOther(w, "../?failed=1")
		return
	}
	h.log.Info("txboxui: cancel refused", "id", printable.Text(id), "why", not, "remote", r.RemoteAddr)
	seeOther(w, "../?done=cancel&not="+not)
}

func loopbackClient(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkCSRF: the request is not cross-origin, and carries the process's
// token in the form field or header and in the SameSite cookie; a request
// authenticated by a Bearer header (which no browser adds on its own)
// needs no form token.
func (h *Handler) checkCSRF(r *http.Request) error {
	if err := h.cop.Check(r); err != nil {
		return err
	}
	if h.cfg.Token != "" && strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		return nil
	}
	tok := r.Header.Get(csrfHeader)
	if tok == "" {
		tok = r.PostFormValue(csrfField)
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || !equal(tok, h.csrf) || !equal(c.Value, h.csrf) {
		return errors.New("missing or wrong CSRF token: reload the page")
	}
	return nil
}

// maxActionBody bounds the body of an action.
const maxActionBody = 64 << 10

// admit is the prologue of every action (redrive, discard, bulk, consumer
// dead letters): it bounds the body, checks that r may act (may) and
// carries the CSRF token, and parses the form when form is set. On a
// refusal it answers through fail and returns false.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, may func(*http.Request) error, form bool, fail func(code int, err error)) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxActionBody)
	if err := may(r); err != nil {
		fail(http.StatusForbidden, err)
		return false
	}
	if err := h.checkCSRF(r); err != nil {
		fail(http.StatusForbidden, err)
		return false
	}
	if form {
		if err := r.ParseForm(); err != nil {
			fail(http.StatusBadRequest, err)
			return false
		}
	}
	return true
}

// plainFail answers a refused action in plain text.
func plainFail(w http.ResponseWriter) func(int, error) {
	return func(code int, err error) { http.Error(w, "txbox dashboard: "+err.Error(), code) }
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// actionResult is the JSON answer of api/dead/{action}.
type actionResult struct {
	Action string `json:"action"`
	Count  int64  `json:"count"`
	Missed int64  `json:"missed,omitempty"` // seqs given that were not dead messages
	// Refused are the rows the database refused, left dead (409).
	Refused []refusedRow `json:"refused,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// refusedRow is a dead row an action left as it was, and why.
type refusedRow struct {
	Seq    int64  `json:"seq"`
	Reason string `json:"reason"`
}

func (h *Handler) serveAction(w http.ResponseWriter, r *http.Request) {
	api := strings.HasPrefix(r.URL.Path, "/api/")
	action := r.PathValue("action")
	fail := func(code int, err error) {
		if api {
			writeJSON(w, code, actionResult{Action: action, Error: err.Error()})
			return
		}
		http.Error(w, "txbox dashboard: "+err.Error(), code)
	}
	if action != "redrive" && action != "discard" {
		fail(http.StatusNotFound, fmt.Errorf("unknown action %q", action))
		return
	}
	if !h.admit(w, r, h.mayMutate, false, fail) { // actionSeqs reads the form or the JSON body
		return
	}
	seqs, err := actionSeqs(r, api)
	if err != nil {
		fail(http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	do := h.cfg.Dead.Redrive
	if action == "discard" {
		do = h.cfg.Dead.Discard
	}
	n, err := do(ctx, seqs...)
	// Rows the database refused stay dead; the others were done.
	var refused []dead.Refused
	if re, ok := errors.AsType[*dead.RefusedError](err); ok {
		refused, err = re.Rows, re.Err
		for _, r := range refused {
			h.log.Warn("txboxui: "+action+" refused by the database", "seq", r.Seq, "reason", r.Reason)
		}
	}
	h.state(r.Context(), true) // show the result at once
	if err != nil {
		h.log.Error("txboxui: "+action+" failed", "seqs", seqs, "err", err)
		if api {
			fail(http.StatusInternalServerError, fmt.Errorf("%s failed: %w", action, err))
			return
		}
		seeOther(w, "../?failed=1")
		return
	}
	h.log.Info("txboxui: "+action, "seqs", seqs, "count", n, "remote", r.RemoteAddr)
	// Seqs that are not dead (any more) are not an error of the server,
	// but the client is told: 404 when none was, else the count missed.
	var missed int64
	if len(seqs) > 0 {
		missed = int64(len(seqs)) - n - int64(len(refused))
	}
	if api {
		res, code := actionResult{Action: action, Count: n, Missed: missed}, http.StatusOK
		for _, r := range refused {
			res.Refused = append(res.Refused, refusedRow(r))
		}
		if missed > 0 {
			res.Error = fmt.Sprintf("%d of the %d seqs given are not dead messages", missed, len(seqs))
			if n == 0 {
				code = http.StatusNotFound
			}
		}
		if len(refused) > 0 {
			res.Error = strings.TrimPrefix(res.Error+fmt.Sprintf("; the database refused to %s %d dead message(s)", action, len(refused)), "; ")
			code = http.StatusConflict
		}
		writeJSON(w, code, res)
		return
	}
	seeOther(w, "../?done="+action+"&n="+strconv.FormatInt(n, 10)+"&missed="+strconv.FormatInt(missed, 10)+
		"&refused="+strconv.Itoa(len(refused)))
}

// seeOther redirects to the relative loc as is: http.Redirect would make
// it absolute from the request's path, which under http.StripPrefix has
// lost the prefix; the browser resolves it from the URL it posted to.
func seeOther(w http.ResponseWriter, loc string) {
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusSeeOther)
}

// actionSeqs reads the seqs to act on: form fields seq (repeated) or
// all=1; for the API, a JSON body {"seqs": [...]} or {"all": true}.
func actionSeqs(r *http.Request, api bool) ([]int64, error) {
	var seqs []string
	var all bool
	if api && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var body struct {
			Seqs []int64 `json:"seqs"`
			All  bool    `json:"all"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return nil, fmt.Errorf("bad JSON body: %w", err)
		}
		for _, s := range body.Seqs {
			seqs = append(seqs, strconv.FormatInt(s, 10))
		}
		all = body.All
	} else {
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		seqs, all = r.PostForm["seq"], r.PostFormValue("all") == "1"
	}
	if all == (len(seqs) > 0) {
		return nil, errors.New("give the seqs of dead messages, or all")
	}
	out := make([]int64, len(seqs))
	for i, s := range seqs {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a seq", s)
		}
		out[i] = n
	}
	return out, nil
}

// age formats seconds as a short duration: 0s, 4.2s, 3m05s, 2h10m, 3d4h.
func age(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d <= 0:
		return "0s"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return age(time.Since(t).Seconds()) + " ago"
}

func rate(p *float64) string {
	if p == nil {
		return "–"
	}
	return strconv.FormatFloat(*p, 'f', 1, 64) + "/s"
}

// Sparkline size, in SVG user units.
const sparkW, sparkH = 240.0, 40.0

// spark returns the points of an SVG polyline drawing the metric of the
// history ("undelivered", "dead" or "oldest"), scaled to its maximum.
func spark(hist []Sample, metric string) string {
	vals := sparkValues(hist, metric)
	switch len(vals) {
	case 0:
		return ""
	case 1: // a flat line, not an invisible point
		vals = append(vals, vals[0])
	}
	top := 0.0
	for _, v := range vals {
		top = math.Max(top, v)
	}
	var b strings.Builder
	for i, v := range vals {
		x := sparkW
		if len(vals) > 1 {
			x = sparkW * float64(i) / float64(len(vals)-1)
		}
		y := sparkH - 1
		if top > 0 {
			y = 1 + (sparkH-2)*(1-v/top)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x, y)
	}
	return b.String()
}

// sparkLast is the maximum of the metric over the history, for the
// sparkline's label.
func sparkLast(hist []Sample, metric string) string {
	top := 0.0
	for _, v := range sparkValues(hist, metric) {
		top = math.Max(top, v)
	}
	if metric == "oldest" {
		return age(top)
	}
	return strconv.FormatFloat(top, 'f', 0, 64)
}

func sparkValues(hist []Sample, metric string) []float64 {
	out := make([]float64, 0, len(hist))
	for _, s := range hist {
		switch metric {
		case "undelivered":
			out = append(out, float64(s.Undelivered()))
		case "dead":
			out = append(out, float64(s.Dead))
		case "oldest":
			out = append(out, s.OldestClaimableSec)
		}
	}
	return out
}
