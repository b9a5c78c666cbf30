package natsjs

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
)

// hdrFrame is what nats.go adds to a non-empty header block: the
// "NATS/1.0\r\n" line and the blank line that ends the block.
const hdrFrame = len("NATS/1.0\r\n") + len("\r\n")

// createdAtLen is the length of a Txbox-Created-At value (wire.Layout in
// UTC) for the years 0 to 9999.
const createdAtLen = len(wire.Layout) - len("Z07:00") + len("Z")

// fits reports whether m, with a subject of subjLen bytes, is surely
// within the protocol line and payload limits, from an upper bound of its
// header block that it computes without building the message: each header
// counts len(name) + len(value) + 4 bytes (nats.go trims values and a
// reserved name is dropped, so the block can only be smaller). False means "measure it" (checkSizes), not "refuse it"; a
// message with CloudEvents attributes or a creation time outside the years
// 0 to 9999 is always measured.
func (p *Publisher) fits(m txbox.Message, subjLen int) bool {
	if p.ceSource != "" {
		return false
	}
	hdr := 0
	for k, v := range m.Headers {
		hdr += len(k) + len(v) + 4
	}
	if m.Key != "" {
		hdr += len(txbox.HeaderKey) + len(m.Key) + 4
	}
	if !m.CreatedAt.IsZero() {
		if y := m.CreatedAt.UTC().Year(); y < 0 || y > 9999 {
			return false
		}
		hdr += len(txbox.HeaderCreatedAt) + createdAtLen + 4
	}
	if m.ID != "" {
		hdr += len(jetstream.MsgIDHeader) + len(m.ID) + 4
	}
	if hdr > 0 {
		hdr += hdrFrame
	}
	size := hdr + len(m.Payload)
	line := subjLen + 1 + p.replyLen + 1 + digits(size)
	if hdr > 0 {
		line += 1 + digits(hdr)
	}
	if line > p.MaxControlLine() {
		return false
	}
	limit := p.maxPayload()
	return limit <= 0 || int64(size) <= limit
}

// digits returns the length of n (>= 0) in decimal.
func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// values hands out one-element header values from one backing array, so
// that a message's own headers cost one allocation, not one each.
type values []string

func (v *values) one(s string) []string {
	*v = append(*v, s)
	n := len(*v)
	return (*v)[n-1 : n : n]
}
