package crash_test

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is one of the harness's programs, run again and again: Start runs
// it with its output appended to its log file, Kill SIGKILLs it. If it
// exits by itself it is counted (unexpected exits are reported in the
// ledger) and started again after restartDelay.
type proc struct {
	name string
	argv []string
	env  []string
	log  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	starts  int
	exits   int // exits the harness did not cause
	stopped bool
}

const restartDelay = 300 * time.Millisecond

func (p *proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked()
}

func (p *proc) startLocked() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(f, "=== harness: start #%d of %s at %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		byItself := p.cmd == cmd // else the harness killed it
		if byItself {
			p.exits++
			p.cmd = nil
			fmt.Fprintf(f, "=== harness: %s exited by itself: %v\n", p.name, err)
		}
		stopped := p.stopped
		p.mu.Unlock()
		_ = f.Close()
		close(done)
		if !byItself || stopped {
			return
		}
		time.AfterFunc(restartDelay, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.cmd == nil && !p.stopped {
				_ = p.startLocked()
			}
		})
	}()
	return nil
}

// Kill SIGKILLs the running process and waits until it is gone.
func (p *proc) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Stop kills the process for good.
func (p *proc) Stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.Kill()
}

// counts reports how often the process was started and how often it
// exited by itself.
func (p *proc) counts() (starts, exits int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts, p.exits
}
