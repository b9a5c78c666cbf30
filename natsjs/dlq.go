package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/internal/wire"
)

// HeaderRedriveFor names, on a dead letter sent back by
// DeadLetters.Redrive, the one binding that is to handle it: the
// Subscriber's subscriptions of other bindings on the stream ack it
// without handing it out.
const HeaderRedriveFor = "Txbox-Redrive-For"

// redriveIDPrefix starts the Nats-Msg-Id of a redriven dead letter, whose
// delivery's id is then its Txbox-Message-Id.
const redriveIDPrefix = "redrive:"

// DeadLetters implements dlq.Store on JetStream: a binding's dead letters
// are the messages on its dead-letter subject (Subscriber.DeadLetterSubject)
// in whichever stream captures it; a Ref is a dead letter's sequence in
// that stream.
type DeadLetters struct {
	js     jetstream.JetStream
	prefix string
	nc     *nats.Conn // made by DeadLettersFromURL: Close closes it
}

var _ dlq.Store = (*DeadLetters)(nil)

// NewDeadLetters returns the dead letters of the bindings of a Subscriber
// configured with prefix as its DeadLetterPrefix ("": the default).
func NewDeadLetters(nc *nats.Conn, prefix string) (*DeadLetters, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: natsjs: nil connection", txbox.ErrInvalidConfig)
	}
	if prefix == "" {
		prefix = DefaultDeadLetterPrefix
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsjs: %w", err)
	}
	return &DeadLetters{js: js, prefix: prefix}, nil
}

func (d *DeadLetters) subject(binding string) (string, error) {
	if _, _, err := ParseBinding(binding); err != nil {
		return "", err
	}
	return d.prefix + strings.ReplaceAll(binding, "/", "."), nil
}

// stream returns the stream that captures the binding's dead letters.
func (d *DeadLetters) stream(ctx context.Context, binding string) (jetstream.Stream, string, error) {
	subj, err := d.subject(binding)
	if err != nil {
		return nil, "", err
	}
	name, err := d.js.StreamNameBySubject(ctx, subj)
	if err != nil {
		return nil, "", fmt.Errorf("natsjs: no stream captures the dead-letter subject %s: %w", subj, err)
	}
	st, err := d.js.Stream(ctx, name)
	if err != nil {
		return nil, "", fmt.Errorf("natsjs: dead letters' stream %s: %w", name, err)
	}
	return st, subj, nil
}

func parseRef(ref string) (uint64, error) {
	seq, err := strconv.ParseUint(ref, 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("natsjs: dead letter %q: want a stream sequence, a positive integer", ref)
	}
	return seq, nil
}

// List returns the binding's dead letters matching q, in stream order.
func (d *DeadLetters) List(ctx context.Context, binding string, q dlq.Query) (dlq.Page, error) {
	st, subj, err := d.stream(ctx, binding)
	if err != nil {
		return dlq.Page{}, err
	}
	seq := uint64(1)
	if q.After != "" {
		after, err := parseRef(q.After)
		if err != nil {
			return dlq.Page{}, err
		}
		seq = after + 1
	}
	var p dlq.Page
	for {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return p, nil
		}
		if err != nil {
			return p, fmt.Errorf("natsjs: read dead letters of %s: %w", binding, err)
		}
		seq = raw.Sequence + 1
		l := letter(binding, raw)
		if !q.Match(l) {
			continue
		}
		if len(p.Letters) == max(q.Limit, 1) {
			p.More = true
			return p, nil
		}
		p.Letters = append(p.Letters, l)
	}
}

// Get returns the dead letter at sequence ref.
func (d *DeadLetters) Get(ctx context.Context, binding, ref string) (dlq.Letter, error) {
	st, subj, err := d.stream(ctx, binding)
	if err != nil {
		return dlq.Letter{}, err
	}
	raw, err := d.get(ctx, st, subj, ref)
	if err != nil {
		return dlq.Letter{}, err
	}
	return letter(binding, raw), nil
}

func (d *DeadLetters) get(ctx context.Context, st jetstream.Stream, subj, ref string) (*jetstream.RawStreamMsg, error) {
	seq, err := parseRef(ref)
	if err != nil {
		return nil, err
	}
	raw, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && raw.Subject != subj) {
		return nil, fmt.Errorf("%w: sequence %d of stream %s on %s", dlq.ErrNotFound, seq, st.CachedInfo().Config.Name, subj)
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: get dead letter %d: %w", seq, err)
	}
	return raw, nil
}

// deadHeaders are the headers DeadLetter adds to the copy.
var deadHeaders = []string{txbox.HeaderError, txbox.HeaderDeliveries, txbox.HeaderBinding, HeaderSubject, HeaderStreamSeq, txbox.HeaderMessageID}

// letter decodes a dead letter.
func letter(binding string, raw *jetstream.RawStreamMsg) dlq.Letter {
	h := raw.Header
	l := dlq.Letter{Ref: strconv.FormatUint(raw.Sequence, 10), Binding: binding, Error: h.Get(txbox.HeaderError), DeadAt: raw.Time}
	l.Deliveries, _ = strconv.Atoi(h.Get(txbox.HeaderDeliveries))
	l.ID = h.Get(txbox.HeaderMessageID)
	if l.ID == "" {
		l.ID = h.Get(jetstream.MsgIDHeader)
	}
	l.Topic = h.Get(HeaderSubject)
	l.Key = h.Get(txbox.HeaderKey)
	l.CreatedAt = wire.ParseTime(h.Get(txbox.HeaderCreatedAt))
	l.Payload = raw.Data
	for k, v := range h {
		if len(v) == 0 || strings.HasPrefix(strings.ToLower(k), "nats-") || isDeadHeader(k) ||
			k == txbox.HeaderKey || k == txbox.HeaderCreatedAt || k == HeaderRedriveFor {
			continue
		}
		if l.Headers == nil {
			l.Headers = map[string]string{}
		}
		l.Headers[k] = v[0]
	}
	return l
}

func isDeadHeader(k string) bool {
	for _, d := range deadHeaders {
		if strings.EqualFold(k, d) {
			return true
		}
	}
	return false
}

// Redrive publishes each dead letter to the subject it was first
// published to, with its payload and headers, its original id in
// Txbox-Message-Id (the delivery's id: an inbox dedupes it) and the
// binding in HeaderRedriveFor (other bindings of the stream skip it); its
// Nats-Msg-Id is "redrive:" + the dead letters' stream and sequence, so
// that the stream does not drop it as a duplicate of the original, but
// does drop a second redrive of the same dead letter. Once the stream has
// stored it, the dead letter is deleted.
func (d *DeadLetters) Redrive(ctx context.Context, binding string, refs []string) (dlq.Result, error) {
	return d.each(ctx, binding, refs, func(st jetstream.Stream, raw *jetstream.RawStreamMsg) error {
		subject := raw.Header.Get(HeaderSubject)
		if subject == "" {
			return fmt.Errorf("natsjs: dead letter %d has no %s header: where it came from is unknown", raw.Sequence, HeaderSubject)
		}
		out := nats.NewMsg(subject)
		out.Data = raw.Data
		for k, v := range raw.Header {
			if !strings.HasPrefix(strings.ToLower(k), "nats-") && !isDeadHeader(k) {
				out.Header[k] = v
			}
		}
		l := letter(binding, raw)
		if l.ID != "" {
			out.Header.Set(txbox.HeaderMessageID, l.ID)
		}
		out.Header.Set(HeaderRedriveFor, binding)
		out.Header.Set(jetstream.MsgIDHeader, redriveIDPrefix+st.CachedInfo().Config.Name+":"+strconv.FormatUint(raw.Sequence, 10))
		if _, err := d.js.PublishMsg(ctx, out); err != nil {
			return fmt.Errorf("natsjs: redrive dead letter %d to %s: %w", raw.Sequence, subject, err)
		}
		return st.DeleteMsg(ctx, raw.Sequence)
	})
}

// Discard deletes the dead letters.
func (d *DeadLetters) Discard(ctx context.Context, binding string, refs []string) (dlq.Result, error) {
	return d.each(ctx, binding, refs, func(st jetstream.Stream, raw *jetstream.RawStreamMsg) error {
		return st.DeleteMsg(ctx, raw.Sequence)
	})
}

func (d *DeadLetters) each(ctx context.Context, binding string, refs []string, do func(jetstream.Stream, *jetstream.RawStreamMsg) error) (dlq.Result, error) {
	var r dlq.Result
	st, subj, err := d.stream(ctx, binding)
	if err != nil {
		return r, err
	}
	for _, ref := range refs {
		raw, err := d.get(ctx, st, subj, ref)
		if errors.Is(err, dlq.ErrNotFound) {
			r.Missed = append(r.Missed, ref)
			continue
		}
		if err != nil {
			return r, err
		}
		if err := do(st, raw); err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				r.Missed = append(r.Missed, ref) // deleted meanwhile
				continue
			}
			return r, err
		}
		r.Done = append(r.Done, ref)
	}
	return r, nil
}
