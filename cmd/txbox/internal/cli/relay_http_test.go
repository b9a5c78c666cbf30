package cli_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
)

// --http refuses an address other than loopback unless --http-public says
// so, before it opens anything.
func TestRelayHTTPRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	for _, addr := range []string{"0.0.0.0:0", ":9090", "192.0.2.1:9090", "example.com:9090"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _, err := run(ctx, "relay", "--db", db, "--broker", "nats://127.0.0.1:1", "--http", addr)
		cancel()
		if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "--http-public") {
			t.Errorf("--http %s: %v, want an invalid-config error naming --http-public", addr, err)
		}
	}
}

// `txbox relay --http` serves /healthz, /readyz (ready once the relay runs)
// and /metrics with the relay's metrics.
func TestRelayHTTPServesProbesAndMetrics(t *testing.T) {
	t.Parallel()
	for _, ui := range []bool{true, false} {
		t.Run(fmt.Sprintf("ui=%v", ui), func(t *testing.T) {
			t.Parallel()
			relayHTTP(t, ui)
		})
	}
}

// relayHTTP runs the relay with --http (and --ui if ui) and checks what it
// serves; without --ui, /ui/ is not found and says how to serve it.
func relayHTTP(t *testing.T, ui bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "free port")
	addr := ln.Addr().String()
	_ = ln.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	db := "sqlite://" + filepath.Join(dir, "x.db")
	if ui {
		mustRun(t, "migrate", "up", "--db", db, "--inbox-table", "orders_inbox")
	}
	go func() {
		args := []string{"relay", "--db", db, "--migrate",
			"--nats-dir", filepath.Join(dir, "nats"), "--nats-listen", "127.0.0.1:0", "--http", addr}
		if ui {
			args = append(args, "--ui", "--inbox-table", "orders_inbox")
		}
		done <- cli.Run(ctx, args, &out, &errOut)
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.Await(t, "/readyz 200", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("relay exited: %v\n%s", err, errOut.String())
		default:
		}
		code, body := get("/readyz")
		return code == http.StatusOK, fmt.Sprintf("/readyz %d %s\nstderr:\n%s", code, body, errOut.String())
	})
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz %d %q", code, body)
	}
	if out := mustRun(t, "health", "--http", addr); out != "ready\n" {
		t.Fatalf("txbox health against the running relay: %q", out)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "txbox_relay_claim_duration_seconds_count") {
		t.Fatalf("/metrics %d without the relay's metrics:\n%s", code, body)
	}
	if code, body := get("/ui/"); ui && (code != http.StatusOK || !strings.Contains(body, `id="backlog"`) || !strings.Contains(body, `data-name="relay"`) ||
		!strings.Contains(body, `<table class="inbox" data-name="orders_inbox">`)) {
		t.Fatalf("/ui/ %d without the dashboard, its relay and its inbox:\n%s", code, body)
	} else if !ui && (code != http.StatusNotFound || !strings.Contains(body, "start the relay with --ui")) {
		t.Fatalf("/ui/ without --ui: %d %q, want 404 saying how to serve it", code, body)
	}
	if ui {
		// txbox ui, in another process, shows the relay's state from its
		// /readyz.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		testenv.Must(t, err, "free port")
		uiAddr := ln.Addr().String()
		_ = ln.Close()
		uctx, ucancel := context.WithCancel(ctx)
		var uiErr testenv.Buffer
		uiDone := make(chan error, 1)
		go func() {
			uiDone <- cli.Run(uctx, []string{"ui", "--db", db, "--http", uiAddr, "--relay", "http://" + addr, "--inbox-table", "orders_inbox"}, io.Discard, &uiErr)
		}()
		waitServing(t, uiAddr, "/", uiDone, &uiErr)
		resp, err := http.Get("http://" + uiAddr + "/")
		testenv.Must(t, err, "txbox ui page")
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		page := string(b)
		row := page[strings.Index(page, `<tr class="relay" data-name="`+addr+`">`)+1:]
		if i := strings.Index(row, "</tr>"); i < 0 || !strings.Contains(row[:i], `<span class="ok">ready</span>`) || !strings.Contains(page, `data-name="orders_inbox"`) {
			t.Fatalf("txbox ui --relay http://%s does not show the relay ready and the inbox:\n%s", addr, page)
		}
		ucancel()
		if err := <-uiDone; err != nil {
			t.Fatalf("txbox ui: %v", err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v", err)
	}
}
