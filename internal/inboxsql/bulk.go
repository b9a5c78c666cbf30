package inboxsql

import (
	"context"
	"strconv"
	"strings"

	"github.com/txbox/txbox/txboxdriver"
)

// Key names a receipt.
type Key struct{ Source, ID string }

// BulkReceiver is implemented by the dialects that can record many
// receipts in one statement and name the fresh ones (RETURNING: PostgreSQL
// and SQLite; MySQL's affected-row count cannot say which rows).
type BulkReceiver interface {
	// ReceiveMany records the receipts rs (distinct keys), already
	// processed, and returns the keys it inserted.
	ReceiveMany(ctx context.Context, ex txboxdriver.Executor, rs []Receipt) (map[Key]bool, error)
	// Forget deletes the receipt of (source, id).
	Forget(ctx context.Context, ex txboxdriver.Executor, source, id string) error
}

// maxBulkRows bounds the rows of one receive_many statement.
const maxBulkRows = 500

// listMark delimits the item of {{list "item"}} in a rendered statement.
const listMark = "\x00list\x00"

func listFunc(item string) string { return listMark + item + listMark }

// bulk is the SQL of BulkReceiver, with the dialect's placeholders and
// arguments.
type bulk struct {
	receiveMany, forget string
	placeholder         func(n int) string
	args                func(r Receipt) []any
}

func (b *bulk) dests() map[string]*string {
	return map[string]*string{"receive_many": &b.receiveMany, "forget": &b.forget}
}

// expand returns receive_many for n rows: the item repeated, its ?s
// numbered from 1.
func (b *bulk) expand(n int) string {
	head, rest, _ := strings.Cut(b.receiveMany, listMark)
	item, tail, _ := strings.Cut(rest, listMark)
	var s strings.Builder
	s.WriteString(head)
	p := 1
	for i := range n {
		if i > 0 {
			s.WriteByte(',')
		}
		for j := 0; j < len(item); j++ {
			if item[j] != '?' {
				s.WriteByte(item[j])
				continue
			}
			s.WriteString(b.placeholder(p))
			p++
		}
	}
	s.WriteString(tail)
	return s.String()
}

func (b *bulk) ReceiveMany(ctx context.Context, ex txboxdriver.Executor, rs []Receipt) (map[Key]bool, error) {
	fresh := make(map[Key]bool, len(rs))
	for len(rs) > 0 {
		n := min(len(rs), maxBulkRows)
		var args []any
		for _, r := range rs[:n] {
			args = append(args, b.args(r)...)
		}
		rows, err := ex.Query(ctx, b.expand(n), args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k Key
			if err := rows.Scan(&k.Source, &k.ID); err != nil {
				_ = rows.Close()
				return nil, err
			}
			fresh[k] = true
		}
		cerr := rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if cerr != nil {
			return nil, cerr
		}
		rs = rs[n:]
	}
	return fresh, nil
}

func (b *bulk) Forget(ctx context.Context, ex txboxdriver.Executor, source, id string) error {
	_, err := ex.Exec(ctx, b.forget, source, id)
	return err
}

func dollar(n int) string   { return "$" + strconv.Itoa(n) }
func question(n int) string { return "?" + strconv.Itoa(n) }
