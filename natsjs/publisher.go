// Package natsjs connects txbox to NATS JetStream: a Publisher for the
// relay and a Subscriber for package consumer.
//
// Each message is published to subject Prefix+Topic with its headers as NATS
// headers and Nats-Msg-Id set to the message id, so that JetStream drops a
// re-publish that arrives inside the stream's duplicate window (default two
// minutes): the relay's crash-after-publish duplicate never reaches a
// consumer within that window. The streams must exist; see EnsureStream.
//
// The Subscriber pulls from durable consumers (a binding is
// Binding(stream, durable); see EnsureConsumer) and dead-letters to
// DeadLetterPrefix+STREAM.durable.
//
// NewPublisher and NewSubscriber take a *nats.Conn the caller made; whoever
// created it closes it. Give it nats.MaxReconnects(-1) so that it rides out
// a server restart, and a short nats.ReconnectWait (the default is 2s) so that
// it is back soon after the server is.
//
// A Publisher whose connection is closed for good (nats.CLOSED: closed by its
// owner, by the server on a protocol error, after its last reconnect attempt,
// on an authentication error) fails every publish with an error wrapping
// txbox.ErrPublisherClosed, and the relay stops; while the connection is
// reconnecting, publishes fail at once, transiently, and the relay resumes
// within milliseconds of the reconnect (see txbox.ConnectionChecker).
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Prefix is put before every topic to name its subject. Default: ""
	// (subject = topic).
	Prefix string
	// MaxPending bounds the unacknowledged async publishes. Default: 4000.
	MaxPending int
	// MaxControlLine is the server's max_control_line, the longest protocol
	// line it reads (the subject is on it): CheckMessage refuses a message
	// whose line would be longer, since the server closes the connection
	// that sends one. Servers do not announce it. Default: 4096, the
	// server's default.
	MaxControlLine int
	// Logger receives a debug line for each message JetStream acknowledged
	// as a duplicate of one it already held. Default: no logs.
	Logger *slog.Logger
	// CloudEventsSource, when set, adds the CloudEvents binary-mode
	// attributes as headers (NATS protocol binding): ce-specversion 1.0,
	// ce-id = message id, ce-source = CloudEventsSource (a URI-reference),
	// ce-type = topic, ce-time = created-at; the Content-Type header is
	// datacontenttype. Default: "" (none).
	CloudEventsSource string
}

// DefaultMaxControlLine is the NATS server's default max_control_line.
const DefaultMaxControlLine = 4096

// Publisher publishes messages to JetStream, pipelined: a batch is sent
// without waiting, then every ack is awaited.
type Publisher struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	prefix   string
	maxLine  int
	replyLen int // the length of the reply subjects of async publishes
	log      *slog.Logger
	ceSource string
	dups     atomic.Int64
	// maxPayload is the server's max payload (nc.MaxPayload).
	maxPayload func() int64
}

var (
	_ txbox.Publisher         = (*Publisher)(nil)
	_ txbox.MessageChecker    = (*Publisher)(nil)
	_ txbox.ConnectionChecker = (*Publisher)(nil)
	_ txbox.DuplicateCounter  = (*Publisher)(nil)
)

// NewPublisher returns a Publisher over nc, a connection the caller made;
// whoever created it closes it.
func NewPublisher(nc *nats.Conn, cfg PublisherConfig) (*Publisher, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: natsjs: nil connection", txbox.ErrInvalidConfig)
	}
	if cfg.MaxPending < 0 || cfg.MaxControlLine < 0 {
		return nil, fmt.Errorf("%w: natsjs: negative MaxPending or MaxControlLine", txbox.ErrInvalidConfig)
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 4000
	}
	if cfg.MaxControlLine == 0 {
		cfg.MaxControlLine = DefaultMaxControlLine
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxPending))
	if err != nil {
		return nil, fmt.Errorf("natsjs: %w", err)
	}
	// jetstream's async reply subjects: its inbox prefix and ".", a token of
	// 6 characters and ".", then a reply id of 6.
	inbox := nats.InboxPrefix
	if nc.Opts.InboxPrefix != "" {
		inbox = nc.Opts.InboxPrefix + "."
	}
	return &Publisher{nc: nc, js: js, prefix: cfg.Prefix, maxLine: cfg.MaxControlLine,
		replyLen: len(inbox) + 6 + 1 + 6, log: cfg.Logger, ceSource: cfg.CloudEventsSource, maxPayload: nc.MaxPayload}, nil
}

// Connected reports whether the connection is up; see
// txbox.ConnectionChecker.
func (p *Publisher) Connected() bool { return p.nc.IsConnected() }

// Duplicates returns how many messages JetStream acknowledged as duplicates
// (PubAck.Duplicate: it already held a message with that Nats-Msg-Id inside
// the stream's duplicate window, and dropped this copy); see
// txbox.DuplicateCounter.
func (p *Publisher) Duplicates() int64 { return p.dups.Load() }

// CheckMessage returns the reason NATS would always refuse m, wrapped with
// txbox.Reject, or nil; see txbox.MessageChecker. It refuses a subject
// (Prefix+Topic) that is not a valid subject to publish to (an empty token,
// a wildcard token * or >, white space), a header name NATS cannot encode, a
// protocol line over MaxControlLine (the server would close the connection),
// and a message (its header block as nats.go encodes it, Nats-Msg-Id
// included, plus its payload) over the server's max payload.
//
// The relay calls it for every message, so it builds nothing when an
// upper bound of the sizes is within the limits (see fits), and measures
// the message as nats.go encodes it only when the bound is not.
func (p *Publisher) CheckMessage(m txbox.Message) error {
	// The subject is assembled on the stack: no allocation per message.
	var buf [320]byte
	subj := append(buf[:0], p.prefix...)
	subj = append(subj, m.Topic...)
	if err := checkSubject(subj); err != nil {
		return txbox.Reject(fmt.Errorf("natsjs: subject %q: %w", clip(string(subj)), err))
	}
	for k := range m.Headers {
		if !headerNameOK(k) {
			return txbox.Reject(fmt.Errorf("natsjs: header name %q: NATS header names are printable ASCII without white space or any of %s: %w",
				clip(k), headerForbidden, nats.ErrBadHeaderMsg))
		}
	}
	if p.fits(m, len(subj)) {
		return nil
	}
	return p.checkSizes(m, string(subj))
}

// checkSizes measures the message m as nats.go encodes it against the
// protocol line and payload limits.
func (p *Publisher) checkSizes(m txbox.Message, subj string) error {
	msg := p.Msg(m)
	hdr := msg.Size() - len(msg.Subject) - len(msg.Data)
	size := hdr + len(msg.Data)
	// The server reads "HPUB subject reply hdr_size total_size" (PUB without
	// hdr_size when there are no headers) as one line of at most
	// max_control_line bytes, the verb not counted.
	line := len(subj) + 1 + p.replyLen + 1 + len(strconv.Itoa(size))
	if hdr > 0 {
		line += 1 + len(strconv.Itoa(hdr))
	}
	if line > p.maxLine {
		return txbox.Reject(fmt.Errorf("natsjs: subject of %d bytes makes a protocol line of %d bytes, over the server's max control line of %d bytes (MaxControlLine)",
			len(subj), line, p.maxLine))
	}
	if limit := p.maxPayload(); limit > 0 && int64(size) > limit {
		return txbox.Reject(fmt.Errorf("natsjs: message of %d bytes (header block %d, payload %d) is over the server's max payload of %d bytes: %w",
			size, hdr, len(msg.Data), limit, txbox.ErrPayloadTooLarge))
	}
	return nil
}

// checkSubject refuses what no publish may use: empty tokens, wildcard
// tokens and the white space that splits the protocol's fields.
func checkSubject[S string | []byte](subj S) error {
	if len(subj) == 0 {
		return errors.New("empty subject")
	}
	for i := 0; i < len(subj); i++ {
		switch subj[i] {
		case ' ', '\t', '\r', '\n':
			return fmt.Errorf("white space at byte %d: %w", i, nats.ErrBadSubject)
		}
	}
	for i, start := 0, 0; start <= len(subj); i++ {
		end := start
		for end < len(subj) && subj[end] != '.' {
			end++
		}
		switch tok := subj[start:end]; {
		case len(tok) == 0:
			return fmt.Errorf("token %d is empty: %w", i+1, nats.ErrBadSubject)
		case len(tok) == 1 && (tok[0] == '*' || tok[0] == '>'):
			return fmt.Errorf("token %d is the wildcard %s, which names no subject to publish to: %w", i+1, string(tok), nats.ErrBadSubject)
		}
		start = end + 1
	}
	return nil
}

// headerForbidden are the printable ASCII characters nats.go refuses in a
// header name (ADR-4 and nats.go's isHeaderKeyValid).
const headerForbidden = `"()/,:;<=>?@[\]{}`

func headerNameOK(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 33 || c > 126 || strings.IndexByte(headerForbidden, c) >= 0 {
			return false
		}
	}
	return true
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// closedErr is the error of a publish on a closed connection.
func (p *Publisher) closedErr() error {
	if cause := p.nc.LastError(); cause != nil {
		return fmt.Errorf("natsjs: %w: the NATS connection is closed: %w", txbox.ErrPublisherClosed, cause)
	}
	return fmt.Errorf("natsjs: %w: %w", txbox.ErrPublisherClosed, nats.ErrConnectionClosed)
}

// unusable returns why nothing can be published now: a closed connection
// (for good), or one that is not connected (transient), or nil.
func (p *Publisher) unusable() error {
	switch st := p.nc.Status(); st {
	case nats.CONNECTED:
		return nil
	case nats.CLOSED:
		return p.closedErr()
	default:
		return fmt.Errorf("natsjs: not connected to NATS (%s)", st)
	}
}

// Msg builds the NATS message for m (docs/wire-format.md): user headers
// first, then Txbox-Key, Txbox-Created-At, the CloudEvents attributes if
// configured, and Nats-Msg-Id last, so no header can change the message's
// identity.
func (p *Publisher) Msg(m txbox.Message) *nats.Msg {
	msg := &nats.Msg{Subject: p.prefix + m.Topic, Data: m.Payload, Header: make(nats.Header, len(m.Headers)+3)}
	// One backing array for every header's value.
	vals := make(values, 0, len(m.Headers)+3)
	for k, v := range m.Headers {
		if !txbox.IsReservedHeader(k) { // rows written by plain SQL are not validated by Add
			msg.Header[k] = vals.one(v) // as Header.Set: NATS header names keep their case
		}
	}
	if m.Key != "" {
		msg.Header[txbox.HeaderKey] = vals.one(m.Key)
	}
	if !m.CreatedAt.IsZero() {
		msg.Header[txbox.HeaderCreatedAt] = vals.one(wire.Time(m.CreatedAt))
	}
	if p.ceSource != "" {
		for _, a := range wire.CloudEvents(m.ID, m.Topic, p.ceSource, m.CreatedAt) {
			msg.Header["ce-"+a.Name] = []string{a.Value}
		}
	}
	if m.ID != "" {
		msg.Header[jetstream.MsgIDHeader] = vals.one(m.ID) // canonical already
	}
	return msg
}

// Publish sends msgs and waits for their acks; see txbox.Publisher.
func (p *Publisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	if err := p.unusable(); err != nil {
		// Publishing while reconnecting would buffer the messages and
		// hold the batch until PublishTimeout; fail at once instead.
		for i := range msgs {
			fail(i, err)
		}
		return errs
	}
	// When MaxPending publishes are unacknowledged, PublishMsgAsync waits
	// for room, at most until ctx's deadline.
	stall := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		stall = max(time.Until(d), time.Millisecond)
	}
	trace := txbox.ContextPublishTrace(ctx)
	futures := make([]jetstream.PubAckFuture, len(msgs))
	opts := []jetstream.PublishOpt{jetstream.WithStallWait(stall)} // one slice for the batch
	for i := range msgs {
		f, err := p.js.PublishMsgAsync(p.Msg(msgs[i]), opts...)
		if err != nil {
			fail(i, p.classify(err))
			continue
		}
		futures[i] = f
	}
	// A connection closed while acks are awaited fails no future: look
	// at it every closedCheck, and once closed stop waiting.
	tick := time.NewTicker(closedCheck)
	defer tick.Stop()
	var closed chan struct{} // nil (never ready) until the connection is closed
	for i, f := range futures {
		for waiting := f != nil; waiting; {
			select {
			case ack := <-f.Ok():
				if ack != nil && ack.Duplicate {
					p.dups.Add(1)
					if trace != nil && trace.Duplicate != nil {
						trace.Duplicate(i)
					}
					p.log.Debug("natsjs: JetStream already held this message and dropped the copy",
						"id", msgs[i].ID, "stream", ack.Stream, "seq", ack.Sequence)
				}
				waiting = false
			case err := <-f.Err():
				fail(i, p.classify(err))
				waiting = false
			case <-ctx.Done():
				if p.nc.IsClosed() {
					fail(i, p.closedErr())
				} else {
					fail(i, fmt.Errorf("natsjs: waiting for ack: %w", ctx.Err()))
				}
				waiting = false
			case <-closed:
				fail(i, p.closedErr())
				waiting = false
			case <-tick.C:
				if closed == nil && p.nc.IsClosed() {
					closed = make(chan struct{})
					close(closed)
				}
			}
		}
	}
	return errs
}

// closedCheck is how often Publish looks whether the connection was closed
// while it waits for acks.
const closedCheck = 100 * time.Millisecond

// classify wraps errors that concern the message itself with txbox.Reject;
// everything that concerns the connection or the server's health stays
// transient and costs the message no attempt.
func (p *Publisher) classify(err error) error {
	if errors.Is(err, nats.ErrConnectionClosed) || p.nc.IsClosed() {
		return p.closedErr()
	}
	var api *jetstream.APIError
	switch {
	case errors.As(err, &api):
		switch api.ErrorCode {
		case 10008, 10023, 10077: // cluster unavailable, insufficient resources, store failed
			return err
		}
		if api.Code == 503 || api.Code == 408 {
			return err
		}
		return txbox.Reject(err)
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject):
		return txbox.Reject(err)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		// No stream listens on the subject. While connected that is the
		// message's topic's fault; while reconnecting it is not.
		if p.nc.IsConnected() {
			return txbox.Reject(fmt.Errorf("no JetStream stream captures this subject: %w", err))
		}
	}
	return err
}

// StreamConfig is what EnsureStream creates.
type StreamConfig struct {
	Name     string
	Subjects []string
	// Duplicates is the dedupe window for Nats-Msg-Id. Default: 2m.
	Duplicates time.Duration
	// Storage defaults to file storage.
	Storage jetstream.StorageType
	// MaxAge is how long the stream keeps a message: the horizon the
	// consumer compares with the inbox retention at startup (see
	// Subscriber.Horizon). Default: 0, no age limit.
	MaxAge time.Duration
}

// EnsureStream creates the stream if it does not exist and returns it; an
// existing stream is left as it is.
func EnsureStream(ctx context.Context, nc *nats.Conn, cfg StreamConfig) (jetstream.Stream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("natsjs: look up stream %s: %w", cfg.Name, err)
	}
	s, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: cfg.Name, Subjects: cfg.Subjects, Duplicates: cfg.Duplicates, Storage: cfg.Storage, MaxAge: cfg.MaxAge,
	})
	if err != nil {
		return nil, fmt.Errorf("natsjs: create stream %s: %w", cfg.Name, err)
	}
	return s, nil
}
