package txboxui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/dlq"
)

// DLQRef is a consumer binding whose dead letters the DLQ panel lists,
// shows, redrives and discards.
type DLQRef struct {
	// Name tells the broker, e.g. "nats".
	Name string
	// Binding is the handler's binding (consumer.HandlerConfig.Binding).
	Binding string
	// Store holds its dead letters, e.g. natsjs.NewDeadLetters.
	Store dlq.Store
}

// dlqLimit is how many dead letters of a binding the panel lists.
const dlqLimit = 100

// dlqClip is how much of a payload the panel shows.
const dlqClip = 200

type dlqBinding struct {
	Name, Binding string
	Letters       []dlq.Letter
	More          bool
	Error         string
}

type dlqView struct {
	Title    string
	CSRF     string
	CanEdit  bool
	Done     string
	Failed   bool
	Bindings []dlqBinding
}

func (dlqView) Q(s string) string { return url.QueryEscape(s) }
func (dlqView) Clip(p []byte) string {
	if len(p) > dlqClip {
		return string(p[:dlqClip]) + "… (" + strconv.Itoa(len(p)) + " bytes)"
	}
	return string(p)
}
func (dlqView) Last(ls []dlq.Letter) string { return ls[len(ls)-1].Ref }

// dlqRef returns the configured binding named b.
func (h *Handler) dlqRef(b string) (DLQRef, bool) {
	for _, d := range h.cfg.DLQ {
		if d.Binding == b {
			return d, true
		}
	}
	return DLQRef{}, false
}

// mayAct says why r may not change anything (redrive, discard or cancel;
// on the broker's dead letters too), or nil.
func (h *Handler) mayAct(r *http.Request) error {
	if h.cfg.ReadOnly {
		return errors.New("the dashboard is read-only")
	}
	if h.cfg.Token == "" && !loopbackClient(r) {
		return errors.New("actions from a client that is not on loopback need a token (txboxui.Config.Token, txbox ui --token)")
	}
	return nil
}

func (h *Handler) render(w http.ResponseWriter, name string, v any) {
	var buf bytes.Buffer
	if err := page.ExecuteTemplate(&buf, name, v); err != nil {
		h.log.Error("txboxui: render", "err", err)
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

func (h *Handler) setCSRFCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: h.csrf, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// serveDLQ is the panel: the dead letters of each configured binding.
func (h *Handler) serveDLQ(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	v := dlqView{Title: h.cfg.Title, CSRF: h.csrf, CanEdit: h.mayAct(r) == nil}
	q := r.URL.Query()
	if a := q.Get("done"); a == "redrive" || a == "discard" {
		n, _ := strconv.Atoi(q.Get("n"))
		v.Done = fmt.Sprintf("%s %d dead letter(s).", map[string]string{"redrive": "Redrove", "discard": "Discarded"}[a], n)
		if missed, _ := strconv.Atoi(q.Get("missed")); missed > 0 {
			v.Done += fmt.Sprintf(" %d were gone meanwhile.", missed)
			v.Failed = n == 0
		}
	}
	if q.Get("failed") != "" {
		v.Done, v.Failed = "The action failed; see the server's log.", true
	}
	for _, d := range h.cfg.DLQ {
		b := dlqBinding{Name: d.Name, Binding: d.Binding}
		p, err := d.Store.List(ctx, d.Binding, dlq.Query{Limit: dlqLimit})
		if err != nil {
			b.Error = h.failed("list dead letters of "+d.Binding, err)
		}
		b.Letters, b.More = p.Letters, p.More
		v.Bindings = append(v.Bindings, b)
	}
	h.setCSRFCookie(w, r)
	h.render(w, "dlq.html", v)
}

// serveDLQLetter shows one dead letter.
func (h *Handler) serveDLQLetter(w http.ResponseWriter, r *http.Request) {
	d, ok := h.dlqRef(r.URL.Query().Get("binding"))
	if !ok {
		http.Error(w, "txbox dashboard: no such consumer binding", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	l, err := d.Store.Get(ctx, d.Binding, r.URL.Query().Get("ref"))
	if errors.Is(err, dlq.ErrNotFound) {
		http.Error(w, "txbox dashboard: no such dead letter (redriven or discarded meanwhile?)", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, "txbox dashboard: "+h.failed("read dead letter", err), http.StatusInternalServerError)
		return
	}
	type kv struct{ Name, Value string }
	var hs []kv
	for _, k := range slices.Sorted(maps.Keys(l.Headers)) {
		hs = append(hs, kv{k, l.Headers[k]})
	}
	h.render(w, "dlqletter.html", struct {
		dlqView
		Letter  dlq.Letter
		Headers []kv
	}{dlqView{Title: h.cfg.Title}, l, hs})
}

// serveDLQAction redrives or discards the dead letters ref (repeated) of
// binding.
func (h *Handler) serveDLQAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if action != "redrive" && action != "discard" {
		http.Error(w, "txbox dashboard: unknown action", http.StatusNotFound)
		return
	}
	if !h.admit(w, r, h.mayAct, true, plainFail(w)) {
		return
	}
	d, ok := h.dlqRef(r.PostFormValue("binding"))
	refs := r.PostForm["ref"]
	if !ok || len(refs) == 0 {
		http.Error(w, "txbox dashboard: give a configured binding and the refs of its dead letters", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	do := d.Store.Redrive
	if action == "discard" {
		do = d.Store.Discard
	}
	res, err := do(ctx, d.Binding, refs)
	if err != nil {
		h.log.Error("txboxui: dead letters "+action+" failed", "binding", d.Binding, "refs", refs, "done", res.Done, "err", err)
		seeOther(w, "../dlq?failed=1")
		return
	}
	h.log.Info("txboxui: dead letters "+action, "binding", d.Binding, "refs", res.Done, "missed", res.Missed, "remote", r.RemoteAddr)
	seeOther(w, "../dlq?done="+action+"&n="+strconv.Itoa(len(res.Done))+"&missed="+strconv.Itoa(len(res.Missed)))
}

// bulkForm is the filter of a bulk action on dead messages.
type bulkForm struct{ Topic, Key, Error, Since string }

func (f bulkForm) String() string {
	var parts []string
	for _, p := range [][2]string{{"topic", f.Topic}, {"key", f.Key}, {"error", f.Error}, {"since", f.Since}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+strconv.Quote(p[1]))
		}
	}
	return strings.Join(parts, ", ")
}

// serveBulk redrives or discards the dead messages a filter selects: with
// dry_run it shows them and a button that does it.
func (h *Handler) serveBulk(w http.ResponseWriter, r *http.Request) {
	if !h.admit(w, r, h.mayMutate, true, plainFail(w)) {
		return
	}
	action := r.PostFormValue("action")
	if action != "redrive" && action != "discard" {
		http.Error(w, "txbox dashboard: action must be redrive or discard", http.StatusBadRequest)
		return
	}
	form := bulkForm{Topic: r.PostFormValue("topic"), Key: r.PostFormValue("key"), Error: r.PostFormValue("error"), Since: strings.TrimSpace(r.PostFormValue("since"))}
	filter := dead.Filter{Topic: form.Topic, Key: form.Key, Error: form.Error}
	if form.Since != "" {
		d, err := time.ParseDuration(form.Since)
		if err != nil || d <= 0 {
			http.Error(w, "txbox dashboard: since must be a positive duration such as 1h", http.StatusBadRequest)
			return
		}
		filter.Since = time.Now().Add(-d)
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	chosen, err := h.cfg.Dead.All(ctx, filter)
	if err != nil {
		http.Error(w, "txbox dashboard: "+h.failed("list dead messages", err), http.StatusInternalServerError)
		return
	}
	if r.PostFormValue("dry_run") != "" {
		h.render(w, "bulk.html", struct {
			Title, CSRF, Action, Filter string
			Form                        bulkForm
			Messages                    []dead.Message
		}{h.cfg.Title, h.csrf, action, form.String(), form, chosen})
		return
	}
	seqs := make([]int64, len(chosen))
	for i, m := range chosen {
		seqs[i] = m.Seq
	}
	var n int64
	if len(seqs) > 0 {
		do := h.cfg.Dead.Redrive
		if action == "discard" {
			do = h.cfg.Dead.Discard
		}
		n, err = do(ctx, seqs...)
	}
	refused := 0
	if re, ok := errors.AsType[*dead.RefusedError](err); ok {
		refused, err = len(re.Rows), re.Err
	}
	h.state(r.Context(), true)
	if err != nil {
		h.log.Error("txboxui: bulk "+action+" failed", "filter", form.String(), "err", err)
		seeOther(w, "../?failed=1")
		return
	}
	h.log.Info("txboxui: bulk "+action, "filter", form.String(), "seqs", seqs, "count", n, "remote", r.RemoteAddr)
	missed := int64(len(seqs)) - n - int64(refused)
	seeOther(w, "../?done="+action+"&n="+strconv.FormatInt(n, 10)+"&missed="+strconv.FormatInt(missed, 10)+"&refused="+strconv.Itoa(refused))
}
