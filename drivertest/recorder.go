package drivertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/txbox/txbox"
)

// Recorder is a txbox.Publisher that records what it is given and
// acknowledges it, or rejects the messages Reject says to reject. It is
// safe for concurrent use.
type Recorder struct {
	// Reject, when set, says whether to reject a message (reported with
	// txbox.Reject, which costs it an attempt).
	Reject func(txbox.Message) bool

	mu   sync.Mutex
	msgs []txbox.Message
}

var _ txbox.Publisher = (*Recorder)(nil)

// Publish records msgs and acknowledges every one Reject does not refuse.
func (p *Recorder) Publish(_ context.Context, msgs []txbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for i, m := range msgs {
		if p.Reject != nil && p.Reject(m) {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = txbox.Reject(fmt.Errorf("test publisher rejects %s", m.ID))
			continue
		}
		p.msgs = append(p.msgs, m)
	}
	return errs
}

// Published returns the acknowledged messages, in publish order.
func (p *Recorder) Published() []txbox.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

func payloads(msgs []txbox.Message, key string) string {
	var out []string
	for _, m := range msgs {
		if key == "*" || m.Key == key {
			out = append(out, string(m.Payload))
		}
	}
	return strings.Join(out, ",")
}
