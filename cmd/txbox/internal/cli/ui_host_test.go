package cli_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
)

// rawGet sends method path to addr with the Host header host, over a
// connection of its own (HTTP/1.1; host "" sends an empty Host; host "-"
// sends an HTTP/1.0 request with no Host at all), and returns the answer.
func rawGet(t *testing.T, addr, method, path, host string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	testenv.Must(t, err, "dial %s", addr)
	defer c.Close()
	req := method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
	if host == "-" {
		req = method + " " + path + " HTTP/1.0\r\n"
	}
	if method == "POST" {
		req += "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 5\r\n\r\nall=1"
	} else {
		req += "\r\n"
	}
	_, err = io.WriteString(c, req)
	testenv.Must(t, err, "write request")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	testenv.Must(t, err, "%s %s Host %q: read answer", method, path, host)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// freeAddr returns a loopback address free now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "free port")
	defer ln.Close()
	return ln.Addr().String()
}

// checkHosts sends every route a request naming each foreign Host (a page
// whose name was rebound to 127.0.0.1: DNS rebinding) and expects 421 with
// no CSRF token or cookie handed out; and each loopback Host (any port, any
// case) and each allowed one, and expects anything but 421.
func checkHosts(t *testing.T, addr string, routes []string, allowed ...string) {
	_, port, _ := net.SplitHostPort(addr)
	foreign := []string{"rebind.evil.example:" + port, "rebind.evil.example", "localhost.evil.com:" + port, "127.0.0.1.nip.io:" + port,
		"127.0.0.1.nip.io", "LOCALHOST.evil.com", "evil.localhost.com:" + port, "[fe80::1]:" + port, "192.0.2.1:" + port, "0.0.0.0:" + port,
		"2130706433:" + port, "", "-"}
	if len(allowed) > 0 {
		foreign = append(foreign, "x"+allowed[0], allowed[0]+".evil.example")
	}
	loop := append([]string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST:" + port, "[::1]:" + port, "127.0.0.2:" + port,
		"dash.localhost:" + port, "127.0.0.1:9", "localhost.:" + port, "127.0.0.1"}, allowed...)
	for _, route := range routes {
		method, path, _ := strings.Cut(route, " ")
		for _, host := range foreign {
			resp, body := rawGet(t, addr, method, path, host)
			if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(body, "DNS rebinding") ||
				strings.Contains(body, "csrf") || resp.Header.Get("Set-Cookie") != "" {
				t.Errorf("%s with Host %q: %d %q (cookie %q), want 421 and nothing else", route, host, resp.StatusCode, body, resp.Header.Get("Set-Cookie"))
			}
		}
		for _, host := range loop {
			if resp, body := rawGet(t, addr, method, path, host); resp.StatusCode == http.StatusMisdirectedRequest ||
				(method == "GET" && resp.StatusCode >= 500) {
				t.Errorf("%s with Host %q (loopback or allowed): %d %q", route, host, resp.StatusCode, body)
			}
		}
	}
}

// The dashboard's routes, as served under prefix.
func dashboardRoutes(prefix string) []string {
	var out []string
	for _, r := range []string{"GET /", "GET /?fragment=1", "GET /api/state", "GET /assets/app.js", "GET /assets/style.css", "GET /dead/1",
		"GET /nothing", "POST /dead/discard", "POST /dead/redrive", "POST /api/dead/discard", "POST /api/dead/redrive"} {
		m, p, _ := strings.Cut(r, " ")
		out = append(out, m+" "+prefix+p)
	}
	return out
}

// txbox ui without a token refuses every request whose Host is not loopback
// (nor --allowed-host), on every route.
func TestUIRefusesForeignHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "x.db")
	mustRun(t, "migrate", "up", "--db", db)
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(ctx, []string{"ui", "--db", db, "--http", addr, "--token", "", "--allowed-host", "dash.example.com"}, &out, &errOut)
	}()
	waitServing(t, addr, "/", done, &errOut)
	checkHosts(t, addr, dashboardRoutes(""), "dash.example.com")
	cancel()
	testenv.Must(t, <-done, "txbox ui")
}

// txbox relay --http on loopback, with and without --ui, refuses every
// request whose Host is not loopback: the dashboard, /metrics, /healthz,
// /readyz and what is not found.
func TestRelayHTTPRefusesForeignHost(t *testing.T) {
	t.Parallel()
	for _, ui := range []bool{true, false} {
		t.Run(fmt.Sprintf("ui=%v", ui), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			addr := freeAddr(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var out, errOut testenv.Buffer
			done := make(chan error, 1)
			args := []string{"relay", "--db", "sqlite://" + filepath.Join(dir, "x.db"), "--migrate",
				"--nats-dir", filepath.Join(dir, "nats"), "--nats-listen", "127.0.0.1:0", "--http", addr}
			routes := []string{"GET /metrics", "GET /healthz", "GET /readyz", "GET /nothing"}
			if ui {
				args = append(args, "--ui")
				routes = append(routes, dashboardRoutes("/ui")...)
			}
			go func() { done <- cli.Run(ctx, args, &out, &errOut) }()
			waitServing(t, addr, "/readyz", done, &errOut)
			if ui {
				waitServing(t, addr, "/ui/", done, &errOut)
			}
			checkHosts(t, addr, routes)
			cancel()
			testenv.Must(t, <-done, "relay")
		})
	}
}

// waitServing waits until GET path on addr answers 200.
func waitServing(t *testing.T, addr, path string, done <-chan error, errOut *testenv.Buffer) {
	t.Helper()
	for last, n := "", 0; ; n++ {
		resp, err := http.Get("http://" + addr + path)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-done:
			t.Fatalf("exited before serving %s: %v\n%s", path, err, errOut.String())
		default:
		}
		// Bounded by progress: give up when the log has not grown for a
		// minute.
		if s := errOut.String(); s != last || n < 1200 {
			if s != last {
				last, n = s, 0
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		t.Fatalf("%s never answered 200\n%s", path, errOut.String())
	}
}

// A dashboard token of white space, with a control character, or shorter
// than 16 bytes off loopback is refused at start, from the flag or the
// environment, by txbox ui and txbox relay --ui (one store or several); the
// token is never printed.
func TestUITokenRefused(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "missing.db")
	stores := filepath.Join(dir, "stores.json")
	testenv.Must(t, os.WriteFile(stores, []byte(`{"stores":[{"name":"a","db":"sqlite://`+filepath.Join(dir, "a.db")+`"}]}`), 0o600), "write stores")
	commands := map[string][]string{
		"ui":          {"ui", "--db", db},
		"relay":       {"relay", "--db", db, "--broker", "nats://127.0.0.1:1", "--ui", "--http-public"},
		"relay group": {"relay", "--stores", stores, "--db", db, "--broker", "nats://127.0.0.1:1", "--ui", "--http-public"},
	}
	flag := map[string]string{"ui": "--token", "relay": "--ui-token", "relay group": "--ui-token"}
	cases := []struct {
		token, addr, want string
	}{
		{" ", "0.0.0.0:0", "white space"},
		{" \t ", "127.0.0.1:0", "white space"},
		{"short-tok3n", "0.0.0.0:0", "11 bytes"},
		{"fifteen-bytes!!", "[::]:0", "15 bytes"},
		{"sixteen-bytes-ok\n", "0.0.0.0:0", "control character"},
		{"has\x1b[31mesc-and-more", "127.0.0.1:0", "control character"},
	}
	for name, args := range commands {
		for _, c := range cases {
			for _, viaEnv := range []bool{false, true} {
				a := append(append([]string{}, args...), "--http", c.addr)
				if viaEnv {
					t.Setenv(cli.EnvUIToken, c.token)
				} else {
					t.Setenv(cli.EnvUIToken, "")
					a = append(a, flag[name], c.token)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				stdout, stderr, err := run(ctx, a...)
				cancel()
				if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s, token %q (env %v) --http %s: %v, want an invalid-config error saying %q", name, c.token, viaEnv, c.addr, err, c.want)
				}
				if strings.TrimSpace(c.token) != "" && strings.Contains(fmt.Sprint(err)+stdout+stderr, strings.TrimSpace(c.token)) {
					t.Errorf("%s: the token was printed: %v", name, err)
				}
			}
		}
	}
	// A token of 16 bytes passes the check off loopback (txbox ui then
	// fails on the missing database, not on the token).
	t.Setenv(cli.EnvUIToken, "sixteen-bytes-ok")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := run(ctx, "ui", "--db", db, "--http", "0.0.0.0:0"); err == nil || strings.Contains(err.Error(), "token") {
		t.Errorf("a 16-byte token off loopback: %v, want no complaint about the token", err)
	}
}

// Store names are shown escaped in the relay's /ui/ store list and in each
// store's dashboard: a bidi override or a C1 control cannot reorder the
// page.
func TestRelayGroupUIEscapesStoreNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const evil, shown = "acme\u202eexe.gpj\u0085", `acme\u202eexe.gpj\u0085`
	stores := filepath.Join(dir, "stores.json")
	testenv.Must(t, os.WriteFile(stores, []byte(fmt.Sprintf(`{"stores":[{"name":%q,"db":"sqlite://%s"},{"name":"plain","db":"sqlite://%s"}]}`,
		evil, filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db"))), 0o600), "write stores")
	r := startGroupRelay(t, "--migrate", "--stores", stores, "--ui", "--nats-dir", filepath.Join(dir, "nats"), "--nats-listen", "127.0.0.1:0")
	r.waitFor("/readyz 200", func() bool { code, _ := r.get("/readyz"); return code == http.StatusOK })
	for _, path := range []string{"/ui/", "/ui/store/0/", "/ui/store/0/?fragment=1"} {
		code, page := r.get(path)
		if code != http.StatusOK || strings.ContainsAny(page, "\u202e\u0085") || !strings.Contains(page, shown) {
			t.Errorf("%s: %d, the store name is not escaped (want %q):\n%s", path, code, shown, page)
		}
	}
	r.stop()
}
