package ui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxui"
)

type client struct {
	t     *testing.T
	base  string
	token string
}

func (c client) do(method, path string, body io.Reader, hdr map[string]string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, body)
	testenv.Must(c.t, err, "request")
	if c.token != "" {
		req.SetBasicAuth("op", c.token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	testenv.Must(c.t, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Without the token every request is refused; a POST needs the page's CSRF
// token in the form and the cookie, and is refused cross-origin; values
// are escaped in the page and the JSON.
func TestAuthCSRFAndEscaping(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const token = "another-t0ken"
	h, err := txboxui.New(txboxui.Config{Backlog: txboxui.InspectBacklog(f.in), Dead: f.letters, Token: token})
	testenv.Must(t, err, "txboxui.New")
	srv := httptest.NewServer(h)
	defer srv.Close()
	anon := client{t, srv.URL, ""}
	wrong := client{t, srv.URL, "nope"}
	op := client{t, srv.URL, token}

	for _, c := range []client{anon, wrong} {
		if code, _ := c.do("GET", "/", nil, nil); code != http.StatusUnauthorized {
			t.Errorf("GET / with token %q: %d, want 401", c.token, code)
		}
		if code, _ := c.do("GET", "/api/state", nil, nil); code != http.StatusUnauthorized {
			t.Errorf("GET /api/state with token %q: %d, want 401", c.token, code)
		}
	}
	code, page := op.do("GET", "/", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /: %d %s", code, page)
	}
	if strings.Contains(page, poisonKey) || !strings.Contains(page, "acct-&lt;b&gt;7&lt;/b&gt;") {
		t.Errorf("the key is not escaped in the page")
	}
	if strings.Contains(page, "postgres://") {
		t.Errorf("the page shows a database URL")
	}
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatalf("no CSRF token in the page")
	}
	_, state := op.do("GET", "/api/state", nil, nil)
	if strings.Contains(state, "<b>") {
		t.Errorf("api/state holds an unescaped <b>: %s", state)
	}
	var st txboxui.State
	testenv.Must(t, json.Unmarshal([]byte(state), &st), "decode state")
	if st.Backlog.Dead != 1 || len(st.Dead) != 1 || st.Dead[0].Key != poisonKey {
		t.Errorf("state %+v", st)
	}

	form := func(tok string) io.Reader {
		return strings.NewReader(url.Values{"csrf": {tok}, "seq": {"999999"}}.Encode())
	}
	formHdr := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	cookie := "txboxui_csrf=" + csrf[1]
	for _, c := range []struct {
		name string
		cl   client
		body io.Reader
		hdr  map[string]string
		want int
	}{
		{"no token", anon, form(csrf[1]), map[string]string{"Content-Type": formHdr["Content-Type"], "Cookie": cookie}, http.StatusUnauthorized},
		{"no CSRF token", op, form(""), map[string]string{"Content-Type": formHdr["Content-Type"], "Cookie": cookie}, http.StatusForbidden},
		{"no cookie", op, form(csrf[1]), formHdr, http.StatusForbidden},
		{"wrong CSRF token", op, form(strings.Repeat("0", 64)), map[string]string{"Content-Type": formHdr["Content-Type"], "Cookie": "txboxui_csrf=" + strings.Repeat("0", 64)}, http.StatusForbidden},
		{"cross-origin", op, form(csrf[1]), map[string]string{"Content-Type": formHdr["Content-Type"], "Cookie": cookie, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"GET is not an action", op, nil, nil, http.StatusMethodNotAllowed},
		{"good", op, form(csrf[1]), map[string]string{"Content-Type": formHdr["Content-Type"], "Cookie": cookie, "Origin": srv.URL, "Sec-Fetch-Site": "same-origin"}, http.StatusSeeOther},
	} {
		method := "POST"
		if c.body == nil {
			method = "GET"
		}
		if code, body := c.cl.do(method, "/dead/discard", c.body, c.hdr); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	// Nothing was discarded (seq 999999 does not exist; the others were
	// refused); a Bearer client needs no CSRF token.
	list, err := f.letters.List(context.Background(), 10)
	testenv.Must(t, err, "dead list")
	if len(list) != 1 {
		t.Fatalf("dead messages %+v", list)
	}
	bearer := client{t, srv.URL, ""}
	code, body := bearer.do("POST", "/api/dead/redrive", strings.NewReader(`{"all":true}`), map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"})
	if code != http.StatusOK || !strings.Contains(body, `"count": 1`) {
		t.Errorf("API redrive: %d %s", code, body)
	}
}

// Without a token, actions are refused to clients that are not on
// loopback (here through a proxy forwarding an allowed name).
func TestNoTokenActionsOnlyFromLoopback(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h, err := txboxui.New(txboxui.Config{Dead: f.letters, AllowedHosts: []string{"dash.internal"}})
	testenv.Must(t, err, "txboxui.New")
	req := httptest.NewRequest("POST", "/api/dead/redrive", strings.NewReader(`{"all":true}`))
	req.RemoteAddr, req.Host = "192.0.2.7:4444", "dash.internal"
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "loopback") {
		t.Errorf("non-loopback action without a token: %d %s", rec.Code, rec.Body.String())
	}
	req = httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr, req.Host = "192.0.2.7:4444", "dash.internal"
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), `class="redrive"`) {
		t.Errorf("non-loopback page without a token: %d, buttons shown: %v", rec.Code, strings.Contains(rec.Body.String(), `class="redrive"`))
	}
}
