package cdc

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox"
)

// errBadRow: a row the relay cannot read at all (no id): it stops rather
// than pass over an event it cannot even record as dead.
var errBadRow = errors.New("txbox cdc: undecodable outbox row")

// row is one inserted outbox row.
type row struct {
	id      int64
	msg     txbox.Message
	invalid error // the row breaks the contract: it is recorded dead, unpublished
}

// relation maps a table's columns, as the stream announces them, to the
// outbox columns the relay reads.
type relation struct {
	ours                                                   bool
	name                                                   string
	id, messageID, topic, key, payload, headers, createdAt int
}

var typeMap = pgtype.NewMap()

func (r *Relay) relation(m *pglogrepl.RelationMessage) *relation {
	rel := &relation{name: m.Namespace + "." + m.RelationName, id: -1, messageID: -1, topic: -1, key: -1, payload: -1, headers: -1, createdAt: -1}
	rel.ours = m.RelationName == r.n.bareTable && (r.n.schema == "" || m.Namespace == r.n.schema)
	for i, c := range m.Columns {
		switch c.Name {
		case "id":
			rel.id = i
		case "message_id":
			rel.messageID = i
		case "topic":
			rel.topic = i
		case "ordering_key":
			rel.key = i
		case "payload":
			rel.payload = i
		case "headers":
			rel.headers = i
		case "created_at":
			rel.createdAt = i
		}
	}
	return rel
}

// decode reads an inserted tuple (text format) into a row: the columns
// the polling relay reads, with the same meaning.
func (rel *relation) decode(t *pglogrepl.TupleData) (row, error) {
	var rw row
	col := func(i int) (*pglogrepl.TupleDataColumn, bool) {
		if t == nil || i < 0 || i >= len(t.Columns) {
			return nil, false
		}
		c := t.Columns[i]
		return c, c.DataType == pglogrepl.TupleDataTypeText
	}
	text := func(i int) string {
		if c, ok := col(i); ok {
			return string(c.Data)
		}
		return ""
	}
	c, ok := col(rel.id)
	if !ok {
		return rw, fmt.Errorf("%w: %s: an inserted row has no id column", errBadRow, rel.name)
	}
	id, err := strconv.ParseInt(string(c.Data), 10, 64)
	if err != nil {
		return rw, fmt.Errorf("%w: %s: id %q: %v", errBadRow, rel.name, c.Data, err)
	}
	rw.id = id
	rw.msg.ID, rw.msg.Topic, rw.msg.Key = text(rel.messageID), text(rel.topic), text(rel.key)
	if c, ok := col(rel.payload); ok {
		var b []byte
		if err := typeMap.Scan(pgtype.ByteaOID, pgtype.TextFormatCode, c.Data, &b); err != nil {
			rw.invalid = fmt.Errorf("payload: %w", err)
		}
		rw.msg.Payload = b
	}
	if c, ok := col(rel.createdAt); ok {
		var at time.Time
		if err := typeMap.Scan(pgtype.TimestamptzOID, pgtype.TextFormatCode, c.Data, &at); err == nil {
			rw.msg.CreatedAt = at
		}
	}
	if c, ok := col(rel.headers); ok && len(c.Data) > 0 {
		var h map[string]string
		if err := json.Unmarshal(c.Data, &h); err != nil {
			rw.invalid = &txbox.InvalidMessageError{ID: rw.msg.ID, Field: "headers", Reason: "is not a JSON object of strings: " + err.Error()}
		} else if len(h) > 0 {
			rw.msg.Headers = h
		}
	}
	if rw.invalid == nil {
		if err := rw.msg.Validate(0); err != nil {
			rw.invalid = err
		}
	}
	if rw.msg.ID == "" && rw.invalid == nil {
		rw.invalid = &txbox.InvalidMessageError{Field: "id", Reason: "message_id is NULL or empty"}
	}
	return rw, nil
}
