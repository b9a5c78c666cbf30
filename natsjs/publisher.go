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
// a server restart.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Prefix is put before every topic to name its subject. Default: ""
	// (subject = topic).
	Prefix string
	// MaxPending bounds the unacknowledged async publishes. Default: 4000.
	MaxPending int
}

// Publisher publishes messages to JetStream, pipelined: a batch is sent
// without waiting, then every ack is awaited.
type Publisher struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	prefix string
}

var _ txbox.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher over nc, a connection the caller made;
// whoever created it closes it.
func NewPublisher(nc *nats.Conn, cfg PublisherConfig) (*Publisher, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: natsjs: nil connection", txbox.ErrInvalidConfig)
	}
	if cfg.MaxPending < 0 {
		return nil, fmt.Errorf("%w: natsjs: negative MaxPending", txbox.ErrInvalidConfig)
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 4000
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxPending))
	if err != nil {
		return nil, fmt.Errorf("natsjs: %w", err)
	}
	return &Publisher{nc: nc, js: js, prefix: cfg.Prefix}, nil
}

// Msg builds the NATS message for m: user headers first, then Nats-Msg-Id,
// so no header can change the message's identity.
func (p *Publisher) Msg(m txbox.Message) *nats.Msg {
	msg := &nats.Msg{Subject: p.prefix + m.Topic, Data: m.Payload, Header: make(nats.Header, len(m.Headers)+1)}
	for k, v := range m.Headers {
		if !txbox.IsReservedHeader(k) { // rows written by plain SQL are not validated by Add
			msg.Header.Set(k, v)
		}
	}
	if m.ID != "" {
		msg.Header[jetstream.MsgIDHeader] = []string{m.ID} // canonical already
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
	// When MaxPending publishes are unacknowledged, PublishMsgAsync waits
	// for room, at most until ctx's deadline.
	stall := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		stall = max(time.Until(d), time.Millisecond)
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	wait := jetstream.WithStallWait(stall)
	for i := range msgs {
		f, err := p.js.PublishMsgAsync(p.Msg(msgs[i]), wait)
		if err != nil {
			fail(i, p.classify(err))
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			fail(i, p.classify(err))
		case <-ctx.Done():
			fail(i, fmt.Errorf("natsjs: waiting for ack: %w", ctx.Err()))
		}
	}
	return errs
}

// classify wraps errors that concern the message itself with txbox.Reject;
// everything that concerns the connection or the server's health stays
// transient and costs the message no attempt.
func (p *Publisher) classify(err error) error {
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
		Name: cfg.Name, Subjects: cfg.Subjects, Duplicates: cfg.Duplicates, Storage: cfg.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("natsjs: create stream %s: %w", cfg.Name, err)
	}
	return s, nil
}
