package cdc_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// `txbox relay --cdc --http` answers /readyz with the log-based relay's
// own readiness: 200 while it holds the slot's lease and streams; a second
// relay on the same slot, a standby waiting for the lease, answers 503 and
// says so, and turns ready once the reader stops.
func TestRelayReadyzIsTheSlotReader(t *testing.T) {
	t.Parallel()
	bin := buildTxbox(t)
	_, pool := logicalCluster(t)
	_, err := cdc.CreateSlot(context.Background(), pool, cdc.Config{})
	testenv.Must(t, err, "create slot")
	ns := testenv.EmbeddedNATS(t)
	run := func() (*exec.Cmd, *syncBuffer, string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		testenv.Must(t, err, "free port")
		addr := ln.Addr().String()
		_ = ln.Close()
		log := &syncBuffer{}
		cmd := exec.Command(bin, "relay", "--cdc", "--db", pool.Config().ConnString(), "--broker", ns.ClientURL(),
			"--http", addr, "--stats-interval", "0")
		cmd.Env = append(os.Environ(), "TXBOX_LOG_LEVEL=info")
		cmd.Stdout, cmd.Stderr = log, log
		testenv.Must(t, cmd.Start(), "start relay")
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("relay on %s:\n%s", addr, log.String())
			}
		})
		return cmd, log, addr
	}
	readyz := func(addr string) (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	a, _, addrA := run()
	eventually(t, "the first relay ready", func() (bool, string) {
		code, body := readyz(addrA)
		return code == http.StatusOK && strings.Contains(body, `"reading": true`), fmt.Sprint(code, body)
	})
	_, _, addrB := run()
	eventually(t, "the standby not ready, saying why", func() (bool, string) {
		code, body := readyz(addrB)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "standby"), fmt.Sprint(code, body)
	})
	testenv.Must(t, a.Process.Signal(syscall.SIGTERM), "stop the first relay")
	_ = a.Wait()
	eventually(t, "the standby takes over, ready", func() (bool, string) {
		code, body := readyz(addrB)
		return code == http.StatusOK && strings.Contains(body, `"reading": true`), fmt.Sprint(code, body)
	})
}
