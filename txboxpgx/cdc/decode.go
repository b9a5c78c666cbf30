package cdc

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/outboxsql"
)

// errBadRow: a row the relay cannot read at all (no id): it stops rather
// than pass over an event it cannot even record as dead.
var errBadRow = errors.New("txbox cdc: undecodable outbox row")

// row is one inserted outbox row, or one message of message mode (id 0).
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
	oids                                                   []uint32 // each column's type
}

var typeMap = pgtype.NewMap()

func (r *Relay) relation(m *pglogrepl.RelationMessage) *relation {
	rel := &relation{name: m.Namespace + "." + m.RelationName, id: -1, messageID: -1, topic: -1, key: -1, payload: -1, headers: -1, createdAt: -1}
	rel.ours = m.RelationName == r.n.bareTable && (r.n.schema == "" || m.Namespace == r.n.schema)
	for i, c := range m.Columns {
		rel.oids = append(rel.oids, c.DataType)
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

// scan decodes column i of t into dst; false when the column is missing
// or NULL.
func (rel *relation) scan(t *pglogrepl.TupleData, i int, dst any) (bool, error) {
	if t == nil || i < 0 || i >= len(t.Columns) || i >= len(rel.oids) {
		return false, nil
	}
	c := t.Columns[i]
	var format int16
	switch c.DataType {
	case pglogrepl.TupleDataTypeText:
		format = pgtype.TextFormatCode
	case pglogrepl.TupleDataTypeBinary:
		format = pgtype.BinaryFormatCode
	default: // NULL; an unchanged TOAST value is never sent for an insert
		return false, nil
	}
	return true, typeMap.Scan(rel.oids[i], format, c.Data, dst)
}

// decode reads an inserted tuple (text or binary format) into a row: the
// columns the polling relay reads, with the same meaning.
func (rel *relation) decode(t *pglogrepl.TupleData) (row, error) {
	var rw row
	var id int64
	ok, err := rel.scan(t, rel.id, &id)
	if !ok || err != nil {
		return rw, fmt.Errorf("%w: %s: an inserted row has no readable id: %v", errBadRow, rel.name, err)
	}
	rw.id = id
	invalid := func(field string, err error) {
		if err != nil && rw.invalid == nil {
			rw.invalid = &txbox.InvalidMessageError{ID: rw.msg.ID, Field: field, Reason: "cannot be read: " + err.Error()}
		}
	}
	_, err = rel.scan(t, rel.messageID, &rw.msg.ID)
	invalid("id", err)
	_, err = rel.scan(t, rel.topic, &rw.msg.Topic)
	invalid("topic", err)
	_, err = rel.scan(t, rel.key, &rw.msg.Key)
	invalid("key", err)
	_, err = rel.scan(t, rel.payload, &rw.msg.Payload)
	invalid("payload", err)
	_, _ = rel.scan(t, rel.createdAt, &rw.msg.CreatedAt)
	var hj []byte
	if ok, err := rel.scan(t, rel.headers, &hj); err != nil {
		invalid("headers", err)
	} else if ok && len(hj) > 0 {
		var h map[string]string
		if err := json.Unmarshal(hj, &h); err != nil {
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

// decodeMessage reads a logical decoding message of message mode (an
// outboxsql.Event as JSON) into a row, committed at commit. Content that
// is not an event is a row to record dead, identified by its LSN.
func decodeMessage(m *pglogrepl.LogicalDecodingMessage, commit time.Time) row {
	var ev outboxsql.Event
	rw := row{msg: txbox.Message{CreatedAt: commit}}
	if err := json.Unmarshal(m.Content, &ev); err != nil {
		rw.msg.ID, rw.msg.Topic, rw.msg.Payload = "lsn:"+m.LSN.String(), m.Prefix, m.Content
		rw.invalid = &txbox.InvalidMessageError{ID: rw.msg.ID, Field: "event", Reason: "is not a txbox event (JSON): " + err.Error()}
		return rw
	}
	rw.msg.ID, rw.msg.Topic, rw.msg.Key, rw.msg.Payload, rw.msg.Headers = ev.ID, ev.Topic, ev.Key, ev.Payload, ev.Headers
	if rw.msg.Payload == nil {
		rw.msg.Payload = []byte{}
	}
	if err := rw.msg.Validate(0); err != nil {
		rw.invalid = err
	} else if rw.msg.ID == "" {
		rw.invalid = &txbox.InvalidMessageError{Field: "id", Reason: "the event has no id"}
	}
	return rw
}
