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

	"github.com/txbox/txbox/tests/testenv"
)

// drive is a browser script (browser/*.js) run under node: it prints one
// line "NAME JSON" per step, and may wait for a line on its standard input.
type drive struct {
	t      *testing.T
	script string
	cmd    *exec.Cmd
	stdin  io.Writer
	lines  *bufio.Scanner
	stderr strings.Builder
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
	d.lines = bufio.NewScanner(stdout)
	d.lines.Buffer(make([]byte, 1<<20), 1<<20)
	return d
}

// step reads the script's output up to its step name and decodes that
// step's JSON into v; other lines are logged.
func (d *drive) step(name string, v any) {
	d.t.Helper()
	for d.lines.Scan() {
		if rest, ok := strings.CutPrefix(d.lines.Text(), name+" "); ok {
			testenv.Must(d.t, json.Unmarshal([]byte(rest), v), "decode %s", name)
			return
		}
		d.t.Logf("%s: %s", d.script, d.lines.Text())
	}
	_ = d.cmd.Wait()
	d.t.Fatalf("%s ended before %s: %s", d.script, name, d.stderr.String())
}

// send writes line to the script's standard input.
func (d *drive) send(line string) {
	d.t.Helper()
	_, err := io.WriteString(d.stdin, line+"\n")
	testenv.Must(d.t, err, "write to %s", d.script)
}

// wait waits for the script to end, and fails the test if it failed.
func (d *drive) wait() {
	d.t.Helper()
	if err := d.cmd.Wait(); err != nil {
		d.t.Fatalf("%s: %v: %s", d.script, err, d.stderr.String())
	}
}
