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
	"github.com/txbox/txbox/internal/dotname"
	"github.com/txbox/txbox/internal/pubtrace"
	"github.com/txbox/txbox/internal/wire"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Prefix is put before every topic to name its subject: dot-separated
	// tokens with no wildcard, as CheckPrefix says. Default: ""
	// (subject = topic).
	Prefix string
	// MaxPending bounds the unacknowledged async publishes. Default: 4000.
	MaxPending int
	// MaxControlLine is the server's max_control_line, the longest protocol
	// line it reads (the subject is on it): CheckMessage refuses a message
	// whose line would be longer, since the server closes the connection
	// that sends one. Servers do not announce it (it is not in INFO), so
	// the Publisher also learns it: when the server closes the connection
	// for "maximum control line exceeded", Publish rejects the unacknowledged
	// messages of the batch with the longest line (txbox.Reject) and from
	// then on checks against that length less one (see MaxControlLine; pass
	// it to the Publisher of the next connection). Default: 4096, the
	// server's default.
	MaxControlLine int
	// Logger receives a debug line for each message JetStream acknowledged
	// as a duplicate of one it already held. Default: no logs.
	Logger *slog.Logger
	// CloudEventsSource, when set, adds the CloudEvents binary-mode
	// attributes as headers (NATS protocol binding): ce-specversion 1.0,
	// ce-id = message id, ce-source = CloudEventsSource (a URI-reference),
	// ce-type = topic, ce-time = created-at, and ce-datacontenttype = the
	// Content-Type header when the message has one; their values are
	// percent-encoded as the binding requires (space, '"', '%' and all
	// but printable ASCII). The ce- names (any case) are then reserved:
	// CheckMessage refuses a message whose own headers use one, and the
	// relay parks it dead. Default: "" (none).
	CloudEventsSource string
}

// CloudEventsPrefix is put before the CloudEvents attribute names in the
// headers (the NATS protocol binding's prefix).
const CloudEventsPrefix = "ce-"

// DefaultMaxControlLine is the NATS server's default max_control_line.
const DefaultMaxControlLine = 4096

// Publisher publishes messages to JetStream, pipelined: a batch is sent
// without waiting, then every ack is awaited.
type Publisher struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	prefix   string
	maxLine  atomic.Int64 // MaxControlLine, or less once learned
	replyLen int          // the length of the reply subjects of async publishes
	log      *slog.Logger
	ceSource string
	dups     atomic.Int64
	// maxPayload is the server's max payload (nc.MaxPayload).
	maxPayload func() int64
	owned      bool // made by FromURL: Close closes nc
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
	if err := dotname.Prefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: natsjs: Prefix %w", txbox.ErrInvalidConfig, err)
	}
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
	p := &Publisher{nc: nc, js: js, prefix: cfg.Prefix,
		replyLen: len(inbox) + 6 + 1 + 6, log: cfg.Logger, ceSource: cfg.CloudEventsSource, maxPayload: nc.MaxPayload}
	p.maxLine.Store(int64(cfg.MaxControlLine))
	if room := cfg.MaxControlLine - p.lineOverhead(); len(cfg.Prefix) >= room {
		return nil, fmt.Errorf("%w: natsjs: Prefix of %d bytes leaves no room for a topic within the max control line of %d bytes (MaxControlLine): every message would be refused",
			txbox.ErrInvalidConfig, len(cfg.Prefix), cfg.MaxControlLine)
	}
	return p, nil
}

// MaxPrefix is the longest prefix that leaves room, with the default inbox
// prefix, for every topic (up to txbox.MaxTopicLen bytes) within a server's
// max_control_line of maxControlLine: the protocol line holds the subject,
// the reply subject and the sizes. NewPublisher refuses only a Prefix that
// leaves room for no topic; a longer one than MaxPrefix refuses the
// messages of long topics.
func MaxPrefix(maxControlLine int) int {
	return max(maxControlLine-defaultLineOverhead-txbox.MaxTopicLen, 0)
}

// defaultLineOverhead is lineOverhead with nats.go's default inbox prefix.
var defaultLineOverhead = (&Publisher{replyLen: len(nats.InboxPrefix) + 6 + 1 + 6}).lineOverhead()

// lineOverhead is what a protocol line holds besides the subject, at most:
// the spaces, the reply subject, and the header and total sizes of a
// message within the largest max payload NATS takes (64 MiB, 8 digits).
func (p *Publisher) lineOverhead() int { return 1 + p.replyLen + 1 + 8 + 1 + 8 }

// MaxControlLine returns the longest protocol line the Publisher sends:
// PublisherConfig.MaxControlLine, or less once the server closed the
// connection on a longer line ("maximum control line exceeded").
func (p *Publisher) MaxControlLine() int { return int(p.maxLine.Load()) }

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
// ce-* header name while CloudEventsSource is set (wrapping
// txbox.ErrReservedHeader), a protocol line over MaxControlLine (the server would close the connection),
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
		if p.ceSource != "" && wire.HasPrefixFold(k, CloudEventsPrefix) {
			return txbox.Reject(fmt.Errorf("natsjs: header name %q is reserved: with CloudEventsSource set, ce-* headers (any case) are the CloudEvents attributes txbox writes: %w",
				clip(k), txbox.ErrReservedHeader))
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
	line, hdr, size := p.line(msg)
	if maxLine := p.MaxControlLine(); line > maxLine {
		return txbox.Reject(fmt.Errorf("natsjs: subject of %d bytes makes a protocol line of %d bytes, over the server's max control line of %d bytes (MaxControlLine)",
			len(subj), line, maxLine))
	}
	if limit := p.maxPayload(); limit > 0 && int64(size) > limit {
		return txbox.Reject(fmt.Errorf("natsjs: message of %d bytes (header block %d, payload %d) is over the server's max payload of %d bytes: %w",
			size, hdr, len(msg.Data), limit, txbox.ErrPayloadTooLarge))
	}
	return nil
}

// line returns the length of msg's protocol line, its header block's size
// and its total size. The server reads "HPUB subject reply hdr_size
// total_size" (PUB without hdr_size when there are no headers) as one line
// of at most max_control_line bytes, the verb not counted.
func (p *Publisher) line(msg *nats.Msg) (line, hdr, size int) {
	hdr = msg.Size() - len(msg.Subject) - len(msg.Data)
	size = hdr + len(msg.Data)
	line = len(msg.Subject) + 1 + p.replyLen + 1 + len(strconv.Itoa(size))
	if hdr > 0 {
		line += 1 + len(strconv.Itoa(hdr))
	}
	return line, hdr, size
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

// Msg builds the NATS message for m (docs/reference/wire-format.md): user headers
// first (the Content-Type header, in any case, as Content-Type), then
// Txbox-Key, Txbox-Created-At, the CloudEvents attributes if
// configured, and Nats-Msg-Id last, so no header can change the message's
// identity.
func (p *Publisher) Msg(m txbox.Message) *nats.Msg {
	msg := &nats.Msg{Subject: p.prefix + m.Topic, Data: m.Payload, Header: make(nats.Header, len(m.Headers)+3)}
	// One backing array for every header's value.
	vals := make(values, 0, len(m.Headers)+3)
	ct := ""
	for k, v := range m.Headers {
		switch {
		case txbox.IsReservedHeader(k): // rows written by plain SQL are not validated by Add
		case p.ceSource != "" && wire.HasPrefixFold(k, CloudEventsPrefix): // CheckMessage refuses these
		case wire.IsContentType(k):
			ct = v
			msg.Header[wire.ContentTypeHeader] = vals.one(v)
		default:
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
			msg.Header[CloudEventsPrefix+a.Name] = []string{wire.PercentEncode(a.Value)}
		}
		if ct != "" {
			msg.Header[CloudEventsPrefix+"datacontenttype"] = []string{wire.PercentEncode(ct)}
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
	trace := pubtrace.From(ctx)
	futures := make([]jetstream.PubAckFuture, len(msgs))
	opts := []jetstream.PublishOpt{jetstream.WithStallWait(stall)} // one slice for the batch
	for i := range msgs {
		nm := p.Msg(msgs[i])
		f, err := p.js.PublishMsgAsync(nm, opts...)
		if err != nil {
			fail(i, p.classify(err, nm.Subject))
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
				fail(i, p.classify(err, f.Msg().Subject))
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
	if errs != nil && p.nc.IsClosed() && maxControlLineExceeded(p.nc.LastError()) {
		p.learnMaxLine(msgs, errs)
	}
	return errs
}

// maxControlLineExceeded reports whether err, the error nats.go keeps
// (Conn.LastError), says the server closed the connection for a protocol
// line over its max_control_line (nats.go has no sentinel for it).
func maxControlLineExceeded(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "maximum control line exceeded")
}

// learnMaxLine handles a connection the server closed on a protocol line
// over its max_control_line, which it does not announce: the line was one
// of the messages without an ack (those before it were read), so the
// server's limit is below the longest line L among them. Those of line L
// are rejected, and CheckMessage refuses lines of L bytes or more from now
// on. Each such close thus parks the longest lines first, until what is
// left fits.
func (p *Publisher) learnMaxLine(msgs []txbox.Message, errs []error) {
	lines := make([]int, len(msgs))
	longest := 0
	for i, m := range msgs {
		if errs[i] == nil || !errors.Is(errs[i], txbox.ErrPublisherClosed) {
			continue
		}
		lines[i], _, _ = p.line(p.Msg(m))
		longest = max(longest, lines[i])
	}
	if longest == 0 {
		return
	}
	for {
		cur := p.maxLine.Load()
		if int64(longest-1) >= cur || p.maxLine.CompareAndSwap(cur, int64(longest-1)) {
			break
		}
	}
	for i, l := range lines {
		if l == longest {
			errs[i] = txbox.Reject(fmt.Errorf("natsjs: the server closed the connection for a protocol line over its max_control_line (\"maximum control line exceeded\"), and this message's line, %d bytes, was the longest of those it had not acknowledged: the server's max_control_line is below %d bytes (MaxControlLine)",
				l, l))
		}
	}
	p.log.Warn("natsjs: the server closed the connection on a protocol line over its max_control_line; lines are now at most "+strconv.Itoa(longest-1)+" bytes",
		"longest_line", longest)
}

// closedCheck is how often Publish looks whether the connection was closed
// while it waits for acks.
const closedCheck = 100 * time.Millisecond

// classify wraps errors that concern the message itself, published to
// subject, with txbox.Reject;
// everything that concerns the connection or the server's health stays
// transient and costs the message no attempt.
func (p *Publisher) classify(err error, subject string) error {
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
			return txbox.Reject(fmt.Errorf("no JetStream stream captures subject %q: %w", subject, err))
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
// existing stream is left as it is. A name or subject CheckStreamName or
// CheckSubject refuses is a txbox.ErrInvalidConfig.
func EnsureStream(ctx context.Context, nc *nats.Conn, cfg StreamConfig) (jetstream.Stream, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
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
