package ui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxui"
)

// hostDo sends method path to srv with the Host header host and hdr, and
// returns the answer's code, body and Set-Cookie.
func hostDo(t *testing.T, srv *httptest.Server, method, path, host, body string, hdr map[string]string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+path, strings.NewReader(body))
	testenv.Must(t, err, "request")
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	testenv.Must(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Set-Cookie")
}

// The attack of issue 34: a page whose name is rebound to 127.0.0.1 reads
// the dashboard (its CSRF token and cookie) and discards a dead message.
// Without a token, the dashboard refuses its Host on every request; from
// loopback the same discard works.
func TestDNSRebindingRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h, err := txboxui.New(txboxui.Config{Backlog: txboxui.InspectBacklog(f.in), Dead: f.letters})
	testenv.Must(t, err, "txboxui.New")
	srv := httptest.NewServer(h)
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	evil := "rebind.evil.example:" + port

	code, page, cookie := hostDo(t, srv, "GET", "/", evil, "", nil)
	if code != http.StatusMisdirectedRequest || strings.Contains(page, "csrf") || cookie != "" {
		t.Fatalf("GET / with Host %s: %d, cookie %q:\n%s", evil, code, cookie, page)
	}
	// The CSRF token and cookie as a loopback page holds them: the
	// foreign Host is refused even with them.
	code, page, cookie = hostDo(t, srv, "GET", "/", "127.0.0.1:"+port, "", nil)
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if code != http.StatusOK || csrf == nil || cookie == "" {
		t.Fatalf("GET / from loopback: %d, cookie %q, csrf %v", code, cookie, csrf)
	}
	jar := strings.Split(cookie, ";")[0]
	form := url.Values{"csrf": {csrf[1]}, "seq": {itoa(f.poison)}}.Encode()
	for _, host := range []string{evil, "localhost.evil.com:" + port, "127.0.0.1.nip.io:" + port} {
		hdr := map[string]string{"Cookie": jar, "Origin": "http://" + host, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/x-www-form-urlencoded"}
		if code, body, _ := hostDo(t, srv, "POST", "/dead/discard", host, form, hdr); code != http.StatusMisdirectedRequest {
			t.Errorf("POST /dead/discard with Host %s: %d %s, want 421", host, code, body)
		}
	}
	list, err := f.letters.List(context.Background(), 10)
	testenv.Must(t, err, "dead list")
	if len(list) != 1 {
		t.Fatalf("the dead message was discarded through a foreign Host: %+v", list)
	}
	hdr := map[string]string{"Cookie": jar, "Origin": srv.URL, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/x-www-form-urlencoded"}
	if code, body, _ := hostDo(t, srv, "POST", "/dead/discard", "127.0.0.1:"+port, form, hdr); code != http.StatusSeeOther {
		t.Errorf("POST /dead/discard from loopback: %d %s, want 303", code, body)
	}
}

// With a token, a request that carries it is served whatever its Host (a
// rebound page cannot know the token); one without it gets 401 and neither
// a CSRF token nor a cookie.
func TestTokenAnyHost(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const token = "a-token-of-24-bytes-long"
	h, err := txboxui.New(txboxui.Config{Dead: f.letters, Token: token})
	testenv.Must(t, err, "txboxui.New")
	srv := httptest.NewServer(h)
	defer srv.Close()
	code, page, cookie := hostDo(t, srv, "GET", "/", "dash.example.com", "", nil)
	if code != http.StatusUnauthorized || strings.Contains(page, "csrf") || cookie != "" {
		t.Errorf("GET / without the token: %d, cookie %q:\n%s", code, cookie, page)
	}
	code, page, _ = hostDo(t, srv, "GET", "/", "dash.example.com", "", map[string]string{"Authorization": "Bearer " + token})
	if code != http.StatusOK || !strings.Contains(page, `name="csrf"`) {
		t.Errorf("GET / with the token from another Host: %d", code)
	}
}

// New refuses a Token of white space or with a control character, and
// AllowedHosts that are not hosts.
func TestConfigRefusesBadTokenAndHosts(t *testing.T) {
	t.Parallel()
	for _, c := range []txboxui.Config{
		{Token: " "}, {Token: "\t\n"}, {Token: "sixteen-bytes-ok\n"}, {Token: "has\x1b[31mesc-and-more"}, {Token: "nul\x00-in-the-token-here"},
		{AllowedHosts: []string{""}}, {AllowedHosts: []string{"https://dash.example.com"}}, {AllowedHosts: []string{"*.example.com"}},
		{AllowedHosts: []string{"dash.example.com/ui"}}, {AllowedHosts: []string{"dash.example.com:http"}}, {AllowedHosts: []string{"a b"}},
	} {
		if _, err := txboxui.New(c); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("New(Token %q, AllowedHosts %q): %v, want an invalid-config error", c.Token, c.AllowedHosts, err)
		}
	}
}

// CheckToken refuses, for any address, a token of white space or with a
// control character; off loopback (an empty host is every interface), no
// token or one under MinTokenLen bytes; and an address that is not
// host:port. Its errors match ErrInvalidConfig and never hold the token.
func TestCheckToken(t *testing.T) {
	t.Parallel()
	long := "sixteen-bytes-ok"
	for _, c := range []struct {
		addr, token, want string // want "" is accepted
	}{
		{"127.0.0.1:0", "", ""},
		{"[::1]:8080", "", ""},
		{"localhost:0", "short", ""},
		{"0.0.0.0:0", long, ""},
		{":8080", long + "-and-more", ""},
		{"0.0.0.0:0", "", "not a loopback address"},
		{":8080", "", "not a loopback address"},
		{"dash.example.com:80", "", "not a loopback address"},
		{"0.0.0.0:0", "short-tok3n", "11 bytes"},
		{"[::]:0", "fifteen-bytes!!", "15 bytes"},
		{"0.0.0.0:0", " ", "white space"},
		{"127.0.0.1:0", " \t ", "white space"},
		{"0.0.0.0:0", long + "\n", "control character"},
		{"127.0.0.1:0", "has\x1b[31mesc-and-more", "control character"},
		{"127.0.0.1:0", "short\r", "control character"},
		{"127.0.0.1", long, "listen address"},
	} {
		err := txboxui.CheckToken(c.addr, c.token)
		if c.want == "" {
			if err != nil {
				t.Errorf("CheckToken(%q, %q): %v, want nil", c.addr, c.token, err)
			}
			continue
		}
		if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("CheckToken(%q, %q): %v, want an invalid-config error saying %q", c.addr, c.token, err, c.want)
		}
		if tok := strings.TrimSpace(c.token); tok != "" && strings.Contains(fmt.Sprint(err), tok) {
			t.Errorf("CheckToken(%q, %q) prints the token: %v", c.addr, c.token, err)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
