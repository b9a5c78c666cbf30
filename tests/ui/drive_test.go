package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/tests/testenv"
)

// drive is a browser script (browser/*.js) run under node: it prints one
// line "NAME JSON" per step, other lines while it waits, and may wait for
// a line on its standard input.
type drive struct {
	t      *testing.T
	script string
	cmd    *exec.Cmd
	stdin  io.Writer
	lines  chan string // closed when the script's output ends
	stderr testenv.Buffer
}

// startDrive starts browser/script with node, env added to the test's
// environment.
func startDrive(ctx context.Context, t *testing.T, node, script string, env ...string) *drive {
	t.Helper()
	d := &drive{t: t, script: script, cmd: exec.CommandContext(ctx, node, script)}
	d.cmd.Dir = "browser"
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stderr = &d.stderr
	stdin, err := d.cmd.StdinPipe()
	testenv.Must(t, err, "stdin")
	stdout, err := d.cmd.StdoutPipe()
	testenv.Must(t, err, "stdout")
	testenv.Must(t, d.cmd.Start(), "start node")
	d.stdin = stdin
	d.lines = make(chan string, 64)
	go func() {
		defer close(d.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
	}()
	return d
}

// next returns the script's next line, false once its output ended. It
// fails the test once the script has printed nothing for testenv.Stall:
// each line is progress, so a slow machine is never failed for being slow.
func (d *drive) next(waitingFor string) (string, bool) {
	d.t.Helper()
	select {
	case line, ok := <-d.lines:
		return line, ok
	case <-time.After(testenv.Stall):
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
		d.t.Fatalf("%s printed nothing for %s waiting for %s: %s", d.script, testenv.Stall, waitingFor, d.stderr.String())
		return "", false
	}
}

// step reads the script's output up to its step name and decodes that
// step's JSON into v; other lines are logged.
func (d *drive) step(name string, v any) {
	d.t.Helper()
	for {
		line, ok := d.next(name)
		if !ok {
			_ = d.cmd.Wait()
			d.t.Fatalf("%s ended before %s: %s", d.script, name, d.stderr.String())
		}
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			testenv.Must(d.t, json.Unmarshal([]byte(rest), v), "decode %s", name)
			return
		}
		d.t.Logf("%s: %s", d.script, line)
	}
}

// send writes line to the script's standard input.
func (d *drive) send(line string) {
	d.t.Helper()
	_, err := io.WriteString(d.stdin, line+"\n")
	testenv.Must(d.t, err, "write to %s", d.script)
}

// wait waits for the script to end, its output logged, and fails the test
// if it failed.
func (d *drive) wait() {
	d.t.Helper()
	for {
		line, ok := d.next("its end")
		if !ok {
			break
		}
		d.t.Logf("%s: %s", d.script, line)
	}
	if err := d.cmd.Wait(); err != nil {
		d.t.Fatalf("%s: %v: %s", d.script, err, d.stderr.String())
	}
}
