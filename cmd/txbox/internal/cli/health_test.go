package cli_test

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/tests/testenv"
)

// txbox health asks a process's /readyz (or /healthz with --live): exit 0
// and "ready" on 200; exit 1 naming each failing check and its reason on
// 503, and when nothing answers.
func TestHealthCommand(t *testing.T) {
	t.Parallel()
	var ready atomic.Bool
	srv := httptest.NewServer(health.Handler(nil, func(context.Context) health.Result {
		if ready.Load() {
			return health.Result{Name: "relay", Ready: true}
		}
		return health.Result{Name: "relay", Error: "broker disconnected\x1b[2J"}
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	main := func(args ...string) (int, string, string) {
		var out, errOut testenv.Buffer
		code := cli.Main(context.Background(), append([]string{"health"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := main("--http", addr); code != 1 || out != "" ||
		errOut != "txbox: error: not ready: relay: broker disconnected\\x1b[2J\n" {
		t.Fatalf("not ready: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := main("--http", addr, "--live"); code != 0 || out != "alive\n" {
		t.Fatalf("--live while not ready: exit %d, %q", code, out)
	}
	ready.Store(true)
	if code, out, _ := main("--http", "http://"+addr+"/"); code != 0 || out != "ready\n" {
		t.Fatalf("ready: exit %d, %q", code, out)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	closed := ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--http", closed}, "not ready: no answer: "},
		{nil, "give --http"},
		{[]string{"--http", addr, "--timeout", "1ns"}, "--timeout"},
	} {
		if code, _, errOut := main(c.args...); code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("health %v: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
}
