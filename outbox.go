package txbox

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txbox/txbox/internal/addbuf"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/txboxdriver"
)

// Defaults of Config.
const (
	DefaultTable = "txbox_outbox"
	// DefaultMaxMessageBytes is 1 MiB less 1 KiB: the default payload limit
	// of NATS (and the smallest of the brokers') counts the broker's own
	// headers too (Nats-Msg-Id, the subject), for which 1 KiB is kept.
	DefaultMaxMessageBytes = 1<<20 - 1<<10
)

// Config configures an Outbox.
type Config struct {
	// Schema is the PostgreSQL schema of the outbox table. Default: "" (the
	// connection's search_path).
	Schema string
	// Table is the outbox table, validated as an SQL identifier.
	// Default: DefaultTable ("txbox_outbox").
	Table string
	// MaxMessageBytes caps a message's payload and headers together (the
	// bytes of their names and values); a larger message is refused with
	// ErrPayloadTooLarge. Default: DefaultMaxMessageBytes (1 MiB - 1 KiB);
	// negative means no cap.
	MaxMessageBytes int
	// Propagate adds the trace context of Add's ctx to each message's
	// headers, so that the relay and the consumers can link their spans to
	// the transaction that wrote the message (package txboxotel provides
	// one: W3C traceparent and tracestate through the OpenTelemetry
	// propagator). Add calls it once per call with an empty map to fill,
	// and copies what it set into every message's headers, except a header
	// the message already has (compared in any case: the caller's header is
	// never overwritten) and a header that breaks the header rules of
	// Message.Validate or would take the message over MaxMessageBytes (it
	// is left out: tracing never fails a write). The caller's maps are not
	// changed. Default: nil, no headers added.
	Propagate func(ctx context.Context, headers map[string]string)
	// ClaimCheck stores the payloads over ClaimCheckThreshold bytes (see
	// ClaimCheck; package claimcheck has a table in the same database):
	// Add puts such a payload into it, in the caller's transaction, and
	// writes the message with an empty payload and the reference in the
	// header HeaderClaimCheck. MaxMessageBytes then caps the message as
	// written, not the stored payload. Default: nil, payloads travel
	// inline.
	ClaimCheck ClaimCheck
	// ClaimCheckThreshold is the largest payload that travels inline when
	// ClaimCheck is set; it must be below MaxMessageBytes. Default:
	// DefaultClaimCheckThreshold (256 KiB).
	ClaimCheckThreshold int
	// MessagePrefix, when set (PostgreSQL only), puts the outbox in
	// message mode: Add writes each message into the write-ahead log as a
	// transactional logical decoding message with this prefix
	// (pg_logical_emit_message(true, prefix, event)), in the caller's
	// transaction, and into no table. Only the log-based relay reading
	// the same prefix (txboxpgx/cdc, Config.MessagePrefix) delivers them;
	// Cancel and Message.DeliverAt need the table and fail. See
	// docs/guide/cdc.md, Message mode. Default: "", rows in the table.
	MessagePrefix string
}

// TableName validates the schema and table of cfg and returns them quoted
// for dialect d, with the defaults applied.
func (cfg Config) TableName(d txboxdriver.Dialect) (string, error) {
	table := cfg.Table
	if table == "" {
		table = DefaultTable
	}
	if err := sqlname.Validate("outbox table", table); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.Schema != "" {
		if d != txboxdriver.Postgres {
			return "", fmt.Errorf("%w: a schema is only supported on PostgreSQL", ErrInvalidConfig)
		}
		if err := sqlname.Validate("schema", cfg.Schema); err != nil {
			return "", fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return sqlname.Qualified(d, cfg.Schema, table), nil
}

// Outbox writes messages into the outbox table in the caller's transactions,
// whose type is TTx (pgx.Tx with txboxpgx, *sql.Tx with txboxsql). It is
// safe for concurrent use.
//
// An Outbox is also the txboxdriver.Driver it writes through, one that knows its
// table: give it to relay.New, dead.New and txboxmigrate.New instead of the
// driver, and they use its table, so that a program names it once.
type Outbox[TTx any] struct {
	drv           txboxdriver.Driver[TTx]
	ins           *outboxsql.Inserter
	maxPayload    int
	schema, table string
	propagate     func(context.Context, map[string]string)
	claims        ClaimCheck
	threshold     int
	emits         bool // message mode (Config.MessagePrefix)
}

// claim is a payload Add puts into the ClaimCheck store.
type claim struct {
	ref     string
	payload []byte
}

var _ txboxdriver.Driver[any] = (*Outbox[any])(nil)

// Dialect, Pool, UnwrapTx and BeginTx are the driver's.
func (o *Outbox[TTx]) Dialect() txboxdriver.Dialect { return o.drv.Dialect() }

// Pool returns the driver's pool.
func (o *Outbox[TTx]) Pool() txboxdriver.Pool { return o.drv.Pool() }

// UnwrapTx returns the driver's Executor for tx.
func (o *Outbox[TTx]) UnwrapTx(tx TTx) txboxdriver.Executor { return o.drv.UnwrapTx(tx) }

// BeginTx begins a transaction through the driver.
func (o *Outbox[TTx]) BeginTx(ctx context.Context) (TTx, txboxdriver.Tx, error) {
	return o.drv.BeginTx(ctx)
}

// OutboxTable returns the outbox table's schema ("" for the search_path)
// and name, defaults applied.
func (o *Outbox[TTx]) OutboxTable() (schema, table string) { return o.schema, o.table }

// Driver returns the driver the Outbox writes through (for its optional
// capabilities, such as txboxdriver.Listener).
func (o *Outbox[TTx]) Driver() txboxdriver.Driver[TTx] { return o.drv }

// New returns an Outbox writing through drv. The table must exist (see
// package txboxmigrate); New does not touch the database.
func New[TTx any](drv txboxdriver.Driver[TTx], cfg Config) (*Outbox[TTx], error) {
	table, err := cfg.TableName(drv.Dialect())
	if err != nil {
		return nil, err
	}
	max := cfg.MaxMessageBytes
	switch {
	case max == 0:
		max = DefaultMaxMessageBytes
	case max < 0:
		max = 0
	}
	name := cfg.Table
	if name == "" {
		name = DefaultTable
	}
	threshold := cfg.ClaimCheckThreshold
	if threshold == 0 {
		threshold = DefaultClaimCheckThreshold
	}
	if cfg.ClaimCheck != nil && (threshold < 0 || (max > 0 && threshold >= max)) {
		return nil, fmt.Errorf("%w: ClaimCheckThreshold %d must be positive and below MaxMessageBytes %d", ErrInvalidConfig, threshold, max)
	}
	ins := outboxsql.NewInserter(drv.Dialect(), table)
	if cfg.MessagePrefix != "" {
		if drv.Dialect() != txboxdriver.Postgres {
			return nil, fmt.Errorf("%w: MessagePrefix (message mode) needs PostgreSQL's write-ahead log; the dialect is %s", ErrInvalidConfig, drv.Dialect())
		}
		ins = outboxsql.NewEmitter(cfg.MessagePrefix)
	}
	return &Outbox[TTx]{drv: drv, ins: ins, maxPayload: max, schema: cfg.Schema, table: name,
		propagate: cfg.Propagate, claims: cfg.ClaimCheck, threshold: threshold, emits: cfg.MessagePrefix != ""}, nil
}

// Add writes msgs in tx, the caller's transaction: they are delivered if and
// only if tx commits. It returns the messages' ids in the order of msgs: a
// message without an ID gets a new UUIDv7 (msgs itself is not changed). Up
// to 1000 messages go in one round trip. If any message is invalid, Add
// returns an *InvalidMessageError and writes nothing. Within a batch of the
// consumer (an addbuf.Buffer in ctx for tx), the rows are inserted with the
// batch's others just before its commit. With Config.ClaimCheck, a payload
// over the threshold is put into the store first, in tx.
func (o *Outbox[TTx]) Add(ctx context.Context, tx TTx, msgs ...Message) ([]string, error) {
	rows, ids, claims, err := o.rows(ctx, msgs)
	if err != nil {
		return nil, err
	}
	if err := o.putClaims(ctx, o.drv.UnwrapTx(tx), claims); err != nil {
		return nil, err
	}
	if b := addbuf.From(ctx); b.Holds(tx) && len(rows) > 0 {
		b.Add(o.ins, rows) // see addbuf.Buffer
		return ids, nil
	}
	if err := o.ins.Insert(ctx, o.drv.UnwrapTx(tx), rows); err != nil {
		return nil, fmt.Errorf("txbox: add: %w", err)
	}
	return ids, nil
}

// AddNoTx writes msgs outside any transaction, as one plain INSERT per up to
// 1000 messages, and returns their ids as Add does. There is no atomicity
// with other writes: use it only for events that stand alone.
func (o *Outbox[TTx]) AddNoTx(ctx context.Context, msgs ...Message) ([]string, error) {
	rows, ids, claims, err := o.rows(ctx, msgs)
	if err != nil {
		return nil, err
	}
	if err := o.putClaims(ctx, o.drv.Pool(), claims); err != nil {
		return nil, err
	}
	if err := o.ins.Insert(ctx, o.drv.Pool(), rows); err != nil {
		return nil, fmt.Errorf("txbox: add: %w", err)
	}
	return ids, nil
}

// Cancel discards, in tx, the message id before it is delivered: every
// row with that message id that no relay has published, scheduled or not
// (Message.DeliverAt), and returns how many it deleted. A row a relay is
// publishing is waited for on PostgreSQL and MySQL (a cancel that comes
// after the publish finds it delivered); on SQLite Cancel returns
// ErrInFlight. When it discards nothing, the error says why: ErrDelivered
// (with the time of the publish), ErrMessageDead, ErrInFlight or
// ErrMessageNotFound. Dead rows are left to package dead. Rows that
// share an id (a reused message id) are all cancelled. Cancel reads the
// pending rows; when it finds none there it reads the whole table, which
// has no index on message_id. Within a consumer's batch (an addbuf.Buffer in
// ctx), a message Add buffered is written only at the batch's commit, and
// Cancel does not see it.
func (o *Outbox[TTx]) Cancel(ctx context.Context, tx TTx, id string) (int, error) {
	return o.cancel(ctx, o.drv.UnwrapTx(tx), id)
}

// CancelNoTx is Cancel outside any transaction.
func (o *Outbox[TTx]) CancelNoTx(ctx context.Context, id string) (int, error) {
	return o.cancel(ctx, o.drv.Pool(), id)
}

func (o *Outbox[TTx]) cancel(ctx context.Context, ex txboxdriver.Executor, id string) (int, error) {
	if id == "" {
		return 0, fmt.Errorf("%w: cancel: the message id is empty", ErrMessageNotFound)
	}
	if o.emits {
		return 0, fmt.Errorf("%w: cancel %q: in message mode (Config.MessagePrefix) a message is in the write-ahead log, which nothing can take back", ErrInvalidConfig, id)
	}
	c, err := o.ins.Cancel(ctx, ex, id)
	switch {
	case err != nil:
		return 0, fmt.Errorf("txbox: cancel %q: %w", id, err)
	case c.Discarded > 0:
		return c.Discarded, nil
	case c.InFlight > 0:
		return 0, fmt.Errorf("%w: cancel %q: a relay is publishing it", ErrInFlight, id)
	case c.Published > 0:
		return 0, fmt.Errorf("%w: cancel %q: published at %s", ErrDelivered, id, c.PublishedAt.UTC().Format(time.RFC3339Nano))
	case c.Dead > 0:
		return 0, fmt.Errorf("%w: cancel %q: it is dead, not delivered (txbox dead discard removes it)", ErrMessageDead, id)
	}
	return 0, fmt.Errorf("%w: cancel %q", ErrMessageNotFound, id)
}

// putClaims stores the claimed payloads through ex.
func (o *Outbox[TTx]) putClaims(ctx context.Context, ex txboxdriver.Executor, claims []claim) error {
	for _, c := range claims {
		if err := o.claims.Put(ctx, ex, c.ref, c.payload); err != nil {
			return fmt.Errorf("txbox: add: claim check: %w", err)
		}
	}
	return nil
}

// claimed returns msgs with each payload over the threshold replaced by a
// claim check reference, and the claims to store; msgs itself when none is
// (or no ClaimCheck is configured).
func (o *Outbox[TTx]) claimed(msgs []Message) ([]Message, []claim, error) {
	if o.claims == nil {
		return msgs, nil, nil
	}
	var out []Message
	var claims []claim
	for i := range msgs {
		m := &msgs[i]
		if len(m.Payload) <= o.threshold {
			continue
		}
		if hasHeader(m.Headers, HeaderClaimCheck) {
			return nil, nil, &InvalidMessageError{ID: m.ID, Index: i, Field: "headers", Reason: fmt.Sprintf("has %s and a payload over the claim check threshold (%d bytes)", HeaderClaimCheck, o.threshold)}
		}
		if out == nil {
			out = slices.Clone(msgs)
		}
		ref, err := uuid.NewV7()
		if err != nil {
			return nil, nil, fmt.Errorf("txbox: new claim check reference: %w", err)
		}
		hs := make(map[string]string, len(m.Headers)+1)
		for k, v := range m.Headers {
			hs[k] = v
		}
		hs[HeaderClaimCheck] = ref.String()
		claims = append(claims, claim{ref: ref.String(), payload: m.Payload})
		out[i].Payload, out[i].Headers = nil, hs
	}
	if out == nil {
		return msgs, nil, nil
	}
	return out, claims, nil
}

func (o *Outbox[TTx]) rows(ctx context.Context, msgs []Message) ([]outboxsql.Row, []string, []claim, error) {
	msgs, claims, err := o.claimed(msgs)
	if err != nil {
		return nil, nil, nil, err
	}
	for i := range msgs {
		if err := msgs[i].Validate(o.maxPayload); err != nil {
			err.(*InvalidMessageError).Index = i
			return nil, nil, nil, err
		}
		if o.emits && !msgs[i].DeliverAt.IsZero() {
			return nil, nil, nil, &InvalidMessageError{Index: i, ID: msgs[i].ID, Field: "DeliverAt", Reason: "needs the outbox table: message mode (Config.MessagePrefix) writes to the write-ahead log"}
		}
	}
	now := time.Now()
	var extra []header // the trace context's headers (Config.Propagate)
	if o.propagate != nil && len(msgs) > 0 {
		extra = o.traceHeaders(ctx)
	}
	ids := make([]string, len(msgs))
	rows := make([]outboxsql.Row, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		ids[i] = m.ID
		if ids[i] == "" {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, nil, nil, fmt.Errorf("txbox: new message id: %w", err)
			}
			ids[i] = id.String()
		}
		hs := m.Headers
		if len(extra) > 0 {
			hs = withHeaders(m, extra, o.maxPayload)
		}
		headers := "{}"
		if len(hs) > 0 {
			b, err := json.Marshal(hs)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("txbox: encode headers: %w", err)
			}
			headers = string(b)
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		rows[i] = outboxsql.Row{ID: ids[i], Topic: m.Topic, Key: m.Key, Payload: payload, Headers: headers, DeliverAt: m.deliverAt(now)}
	}
	// On PostgreSQL each keyed row takes its key's lock (see the key_order
	// migration). Taking them in key order keeps two transactions that add
	// the same keys from deadlocking; a stable sort keeps each key's
	// messages in the caller's order.
	if len(rows) > 1 {
		slices.SortStableFunc(rows, func(a, b outboxsql.Row) int { return strings.Compare(a.Key, b.Key) })
	}
	return rows, ids, claims, nil
}

type header struct{ name, value string }

// traceHeaders returns the headers Config.Propagate sets for ctx that pass
// the header rules, by name.
func (o *Outbox[TTx]) traceHeaders(ctx context.Context) []header {
	h := map[string]string{}
	o.propagate(ctx, h)
	var out []header
	for k, v := range h {
		if checkHeader(k, v) == nil {
			out = append(out, header{k, v})
		}
	}
	slices.SortFunc(out, func(a, b header) int { return strings.Compare(a.name, b.name) })
	return out
}

// withHeaders returns m's headers with those of extra that m does not have
// (in any case) and that keep it within maxBytes (<= 0: no cap), taken in
// order, in a new map; m's own map when none is added.
func withHeaders(m *Message, extra []header, maxBytes int) map[string]string {
	size := len(m.Payload)
	for k, v := range m.Headers {
		size += len(k) + len(v)
	}
	var out map[string]string
	for _, h := range extra {
		k, v := h.name, h.value
		if hasHeader(m.Headers, k) || (maxBytes > 0 && size+len(k)+len(v) > maxBytes) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(m.Headers)+len(extra))
			for mk, mv := range m.Headers {
				out[mk] = mv
			}
		}
		out[k] = v
		size += len(k) + len(v)
	}
	if out == nil {
		return m.Headers
	}
	return out
}

// hasHeader reports whether headers has name, in any case.
func hasHeader(headers map[string]string, name string) bool {
	if _, ok := headers[name]; ok {
		return true
	}
	for k := range headers {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}
