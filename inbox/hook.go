package inbox

import (
	"context"
	"log/slog"
	"time"
)

// EventKind names an audit event.
type EventKind string

// The audit events an Inbox reports to its Hook.
const (
	// EventReceived: a fresh message was recorded (in a transaction that
	// may still roll back; EventHandled or EventHandleFailed follows in
	// Handle).
	EventReceived EventKind = "inbox.received"
	// EventDuplicate: a message was already recorded; its handler did not
	// run.
	EventDuplicate EventKind = "inbox.duplicate"
	// EventHandled: Handle ran the handler and committed.
	EventHandled EventKind = "inbox.handled"
	// EventHandleFailed: the handler or the commit failed; nothing of the
	// transaction, receipt included, was kept.
	EventHandleFailed EventKind = "inbox.handle_failed"
	// EventSwept: Sweep deleted Deleted rows past retention.
	EventSwept EventKind = "inbox.swept"
)

// Event is one audit event.
type Event struct {
	Kind      EventKind
	Table     string        // the inbox table (unquoted, without schema)
	Source    string        // EventSwept: the source swept, empty for every source
	MessageID string        // empty for EventSwept
	Err       error         // EventHandleFailed and a failed EventSwept
	Duration  time.Duration // EventHandled, EventHandleFailed: the transaction's time; EventSwept: the sweep's
	Deleted   int64         // EventSwept
}

// Hook receives audit events. It is called synchronously on the goroutine
// that caused the event, so it must be quick and must not panic; it may be
// called concurrently.
type Hook func(ctx context.Context, e Event)

// LogHook returns a Hook that logs every event through l: received,
// duplicate and handled at Debug, a failed handling at Warn, a sweep at Info
// (at Debug when it deleted nothing, at Error when it failed).
func LogHook(l *slog.Logger) Hook {
	return func(ctx context.Context, e Event) {
		level := slog.LevelDebug
		switch {
		case e.Kind == EventHandleFailed:
			level = slog.LevelWarn
		case e.Kind == EventSwept && e.Err != nil:
			level = slog.LevelError
		case e.Kind == EventSwept && e.Deleted > 0:
			level = slog.LevelInfo
		}
		if !l.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{slog.String("table", e.Table)}
		if e.Kind != EventSwept {
			attrs = append(attrs, slog.String("source", e.Source), slog.String("message_id", e.MessageID))
		} else {
			attrs = append(attrs, slog.Int64("deleted", e.Deleted))
		}
		if e.Duration > 0 {
			attrs = append(attrs, slog.Duration("duration", e.Duration))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.Any("error", e.Err))
		}
		l.LogAttrs(ctx, level, string(e.Kind), attrs...)
	}
}
