package relay

import (
	"context"
	"log/slog"
	"sync"
)

// lifecycle is the background run of a Relay or a Group: Start, Stop,
// Stopped and Err mean the same on both.
type lifecycle struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	stopped chan struct{} // nil or closed: not running in the background
	err     error         // why the background run stopped, if not by Stop or ctx
}

// start runs begin, then run in the background, until stop or ctx ends;
// begin (with the run's ctx and its cancel) may refuse the start. A run
// that returns an error is logged as what + ": stopped" and kept for Err.
func (l *lifecycle) start(ctx context.Context, log *slog.Logger, what string, begin func(context.Context, context.CancelFunc) error, run func(context.Context) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy() {
		return ErrAlreadyStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	if err := begin(ctx, cancel); err != nil {
		cancel()
		return err
	}
	l.cancel, l.stopped, l.err = cancel, make(chan struct{}), nil
	go func(done chan struct{}) {
		defer close(done)
		defer cancel()
		if err := run(ctx); err != nil {
			log.Error(what+": stopped", "err", err)
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
		}
	}(l.stopped)
	return nil
}

// stop asks the background run to stop and waits until it has, or until
// ctx ends.
func (l *lifecycle) stop(ctx context.Context) error {
	l.mu.Lock()
	cancel, done := l.cancel, l.stopped
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closed is a closed channel: Stopped before any start.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (l *lifecycle) done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped == nil {
		return closed
	}
	return l.stopped
}

func (l *lifecycle) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// hold marks the run as held by another (a Group running a Relay): start
// then returns ErrAlreadyStarted and done stays open until release.
func (l *lifecycle) hold() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy() {
		return ErrAlreadyStarted
	}
	l.cancel, l.stopped = nil, make(chan struct{})
	return nil
}

func (l *lifecycle) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped != nil {
		select {
		case <-l.stopped:
		default:
			close(l.stopped)
		}
	}
}

// busy reports whether a run is going on or held. Called with l.mu held.
func (l *lifecycle) busy() bool {
	if l.stopped == nil {
		return false
	}
	select {
	case <-l.stopped:
		return false
	default:
		return true
	}
}
