package outboxsql

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/txbox/txbox/txboxdriver"
)

// Event is the content of a logical decoding message of the outbox's
// message mode: one message, as JSON. Payload is base64 in the JSON
// (encoding/json's []byte); Headers is a JSON object of strings.
type Event struct {
	ID      string            `json:"id"`
	Topic   string            `json:"topic"`
	Key     string            `json:"key,omitempty"`
	Payload []byte            `json:"payload"`
	Headers map[string]string `json:"headers,omitempty"`
}

// NewEmitter returns an Inserter that writes each row into PostgreSQL's
// write-ahead log as a transactional logical decoding message with the
// given prefix (pg_logical_emit_message(true, prefix, event)), in the
// caller's transaction, instead of into a table; a row's DeliverAt is
// not written (Outbox.Add refuses it). Rows come out of the log
// in the order they were written, each transaction's at its commit.
func NewEmitter(prefix string) *Inserter {
	return &Inserter{table: "pg_logical_emit_message:" + prefix, emit: prefix, cache: map[int]string{}}
}

// emitRows writes rows as logical decoding messages: one statement of up
// to 1000 calls, evaluated in order.
func (in *Inserter) emitRows(ctx context.Context, ex txboxdriver.Executor, rows []Row) error {
	for len(rows) > 0 {
		n := min(len(rows), maxRowsPerInsert)
		args := make([]any, 0, n+1)
		args = append(args, in.emit)
		for _, r := range rows[:n] {
			ev := Event{ID: r.ID, Topic: r.Topic, Key: r.Key, Payload: r.Payload}
			if r.Headers != "" && r.Headers != "{}" {
				if err := json.Unmarshal([]byte(r.Headers), &ev.Headers); err != nil {
					return fmt.Errorf("message %s: headers: %w", r.ID, err)
				}
			}
			b, err := json.Marshal(ev)
			if err != nil {
				return fmt.Errorf("message %s: %w", r.ID, err)
			}
			args = append(args, string(b))
		}
		if _, err := ex.Exec(ctx, in.emitStatement(n), args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// emitStatement is the SELECT of n pg_logical_emit_message calls; a
// select list is evaluated left to right.
func (in *Inserter) emitStatement(n int) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.cache[n]; ok {
		return s
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "pg_logical_emit_message(true, $1::text, $%d::text)", i+2)
	}
	s := b.String()
	if n <= 16 {
		in.cache[n] = s
	}
	return s
}
