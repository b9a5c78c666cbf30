package consumer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txbox/txbox"
)

// DefaultVersionHeader is Config.VersionHeader's default: the header whose
// value Route.Version matches.
const DefaultVersionHeader = "Message-Version"

// ErrUnrouted is the cause a dead letter carries when no route of its
// binding claimed the message (UnroutedDeadLetter).
var ErrUnrouted = errors.New("txbox/consumer: no route claims the message")

// Route selects, within a binding, the deliveries one handler claims: by
// topic, and optionally by the version and content-type headers the
// producer set (see docs/reference/wire-format.md). An empty field matches anything.
// The most specific route that matches a delivery claims it: one that
// names the topic beats one that does not, then one that names the
// version, then one that names the content type; two routes of a binding
// that name the same fields with the same values are a startup error, so
// that the choice is never ambiguous. The zero Route claims every delivery
// no other route of its binding claims: a binding with one handler and no
// Route (the one-handler-per-binding case) hands that handler everything.
type Route struct {
	// Topic is Message.Topic exactly as it arrives (the NATS subject with
	// the publisher's prefix, the RabbitMQ routing key, the Kafka topic,
	// the Redis stream).
	Topic string
	// Version is the value of the header Config.VersionHeader
	// (DefaultVersionHeader, "Message-Version"), compared exactly; a
	// producer sets it as a user header (txbox.Message.Headers).
	Version string
	// ContentType is the media type of the Content-Type header (RabbitMQ:
	// the content_type property), without its parameters, compared in any
	// case: "application/json" claims "application/json; charset=utf-8".
	ContentType string
}

// IsZero reports whether r is the catch-all route.
func (r Route) IsZero() bool { return r == Route{} }

func (r Route) String() string {
	if r.IsZero() {
		return "{any}"
	}
	var parts []string
	if r.Topic != "" {
		parts = append(parts, "topic="+r.Topic)
	}
	if r.Version != "" {
		parts = append(parts, "version="+r.Version)
	}
	if r.ContentType != "" {
		parts = append(parts, "content-type="+r.ContentType)
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// normal returns r with its content type lower-cased and without
// parameters, as deliveries are compared.
func (r Route) normal() Route {
	r.ContentType = mediaType(r.ContentType)
	return r
}

// specificity orders routes: topic, then version, then content type.
func (r Route) specificity() int {
	n := 0
	if r.Topic != "" {
		n += 4
	}
	if r.Version != "" {
		n += 2
	}
	if r.ContentType != "" {
		n++
	}
	return n
}

func mediaType(s string) string {
	s, _, _ = strings.Cut(s, ";")
	return strings.ToLower(strings.TrimSpace(s))
}

// Unrouted is what a consumer does with a delivery that no route of its
// binding claims. It is never run by some other handler and never dropped
// without a trace: both policies count it in Stats.Unrouted and, if the
// Observer implements txbox.UnroutedObserver, report it there.
type Unrouted int

// The policies for unrouted deliveries.
const (
	// UnroutedDeadLetter dead-letters the delivery with ErrUnrouted (and
	// the topic, version and content type that matched nothing); it also
	// counts in Stats.DeadLettered.
	UnroutedDeadLetter Unrouted = iota + 1
	// UnroutedAck acknowledges the delivery without running anything (the
	// binding carries kinds this consumer does not handle, on purpose).
	UnroutedAck
)

func (u Unrouted) String() string {
	switch u {
	case UnroutedDeadLetter:
		return "dead-letter"
	case UnroutedAck:
		return "ack"
	case 0:
		return "unset"
	}
	return fmt.Sprintf("Unrouted(%d)", int(u))
}

// BindingConfig declares a binding for routed handlers. Declaring one is
// optional: a binding named by a HandlerConfig exists without it.
type BindingConfig struct {
	// Binding is the binding, as in HandlerConfig.Binding. Required.
	Binding string
	// Unrouted is the binding's policy for deliveries no route claims.
	// Default: Config.Unrouted. A binding whose routes leave some
	// deliveries unclaimed (none has the zero Route) needs one of the two
	// set, or Start fails.
	Unrouted Unrouted
}

// Bind declares a binding (see BindingConfig). Problems are reported by
// Start, with the others.
func (c *Consumer[TTx]) Bind(b BindingConfig) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	c.routing.binds = append(c.routing.binds, b)
	return nil
}

// routing is the Consumer's state for routes.
type routing struct {
	binds    []BindingConfig
	unrouted atomic.Int64
	logged   sync.Map // what was logged once: "horizon:"+binding, "unrouted:"+binding
}

// binding is one subscribed binding and its routes.
type binding[TTx any] struct {
	name        string
	routes      []*handler[TTx] // most specific first
	single      *handler[TTx]   // the one catch-all route, when it is the only route
	unrouted    Unrouted
	concurrency int
}

// label names the binding's handlers, for logs and errors.
func (b *binding[TTx]) label() string {
	names := make([]string, len(b.routes))
	for i, h := range b.routes {
		names[i] = fmt.Sprintf("%q", h.Name)
	}
	return strings.Join(names, ", ")
}

// bindings groups the handlers by binding, in the order of their first
// registration; c.mu is held.
func (c *Consumer[TTx]) bindings() []*binding[TTx] {
	policy := map[string]Unrouted{}
	for _, bc := range c.routing.binds {
		policy[bc.Binding] = bc.Unrouted
	}
	var out []*binding[TTx]
	byName := map[string]*binding[TTx]{}
	for _, h := range c.handlers {
		b := byName[h.Binding]
		if b == nil {
			b = &binding[TTx]{name: h.Binding, unrouted: policy[h.Binding]}
			if b.unrouted == 0 {
				b.unrouted = c.cfg.Unrouted
			}
			byName[h.Binding] = b
			out = append(out, b)
		}
		b.routes = append(b.routes, h)
		n := h.Concurrency
		if n == 0 {
			n = c.cfg.Concurrency
		}
		b.concurrency = max(b.concurrency, n)
	}
	for _, b := range out {
		sort.SliceStable(b.routes, func(i, j int) bool {
			return b.routes[i].route.specificity() > b.routes[j].route.specificity()
		})
		if len(b.routes) == 1 && b.routes[0].route.IsZero() {
			b.single = b.routes[0]
		}
	}
	return out
}

// route returns the handler of b that claims msg, or nil.
func (c *Consumer[TTx]) route(b *binding[TTx], msg *Message) *handler[TTx] {
	if b.single != nil {
		return b.single
	}
	version, ctype := "", ""
	for k, v := range msg.Headers {
		switch {
		case strings.EqualFold(k, c.cfg.VersionHeader):
			version = v
		case strings.EqualFold(k, txbox.HeaderContentType):
			ctype = mediaType(v)
		}
	}
	for _, h := range b.routes {
		r := h.route
		if (r.Topic == "" || r.Topic == msg.Topic) && (r.Version == "" || r.Version == version) &&
			(r.ContentType == "" || r.ContentType == ctype) {
			return h
		}
	}
	return nil
}

// dispatch hands d to the handler of b that claims it, or applies b's
// unrouted policy.
func (c *Consumer[TTx]) dispatch(ctx context.Context, b *binding[TTx], d txbox.Delivery) {
	if b.single != nil {
		c.process(ctx, b.single, d)
		return
	}
	msg := d.Message()
	if h := c.route(b, &msg); h != nil {
		c.process(ctx, h, d)
		return
	}
	c.unrouted(ctx, b, d, &msg)
}

// unrouted applies b's policy to a delivery no route claimed.
func (c *Consumer[TTx]) unrouted(ctx context.Context, b *binding[TTx], d txbox.Delivery, msg *Message) {
	version, ctype := "", ""
	for k, v := range msg.Headers {
		switch {
		case strings.EqualFold(k, c.cfg.VersionHeader):
			version = v
		case strings.EqualFold(k, txbox.HeaderContentType):
			ctype = v
		}
	}
	cause := fmt.Errorf("%w: binding %q has no route for topic %q, version %q, content type %q",
		ErrUnrouted, b.name, msg.Topic, version, ctype)
	dead := b.unrouted == UnroutedDeadLetter
	if obs, ok := c.cfg.Observer.(txbox.UnroutedObserver); ok {
		obs.Unrouted(b.name, dead)
	}
	c.routing.unrouted.Add(1) // after the Observer: Stats never run ahead of it
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	log := c.log.With("binding", b.name, "message_id", msg.ID, "topic", msg.Topic, "version", version, "content_type", ctype)
	var err error
	if dead {
		log.Error("txbox/consumer: dead-lettering a message no route claims", "err", cause)
		c.dead.Add(1)
		err = d.DeadLetter(sctx, cause)
	} else {
		if _, seen := c.routing.logged.LoadOrStore("unrouted:"+b.name, true); !seen {
			log.Warn("txbox/consumer: acking a message no route claims (policy UnroutedAck; further ones are counted in Stats.Unrouted, logged at Debug)")
		} else {
			log.Debug("txbox/consumer: acking a message no route claims")
		}
		err = d.Ack(sctx)
	}
	if err != nil {
		c.ackFailed.Add(1)
		log.Warn("txbox/consumer: settling an unrouted message failed; the broker will redeliver", "err", err)
	}
}

// checkRoutes reports the problems of the bindings' routes and
// declarations.
func (c *Consumer[TTx]) checkRoutes(hs []*handler[TTx], binds []BindingConfig) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if vh := c.cfg.VersionHeader; txbox.IsReservedHeader(vh) || strings.ContainsAny(vh, " \t\r\n:") {
		add("Config.VersionHeader %q cannot be a producer's header (reserved, or not a header name)", vh)
	}
	if u := c.cfg.Unrouted; u < 0 || u > UnroutedAck {
		add("Config.Unrouted is %v: use UnroutedDeadLetter or UnroutedAck", u)
	}
	handled := map[string][]*handler[TTx]{}
	var order []string
	for _, h := range hs {
		if h.Binding == "" {
			continue
		}
		if handled[h.Binding] == nil {
			order = append(order, h.Binding)
		}
		handled[h.Binding] = append(handled[h.Binding], h)
	}
	declared := map[string]Unrouted{}
	for i, bc := range binds {
		switch {
		case bc.Binding == "":
			add("Bind #%d has no Binding", i+1)
			continue
		case bc.Unrouted < 0 || bc.Unrouted > UnroutedAck:
			add("binding %q: Unrouted is %v: use UnroutedDeadLetter or UnroutedAck", bc.Binding, bc.Unrouted)
		}
		if _, dup := declared[bc.Binding]; dup {
			add("binding %q is declared (Bind) more than once", bc.Binding)
		}
		declared[bc.Binding] = bc.Unrouted
		if len(handled[bc.Binding]) == 0 {
			add("binding %q is declared (Bind) but no handler is registered on it: its messages would never be consumed", bc.Binding)
		}
	}
	for _, b := range order {
		hs := handled[b]
		claims := map[Route][]string{}
		var rs []Route
		catchAll := false
		for _, h := range hs {
			r := h.Route.normal()
			if msg := routeProblem(h.Route); msg != "" {
				add("handler %q: Route %s: %s", h.Name, h.Route, msg)
			}
			if r.IsZero() {
				catchAll = true
			}
			if claims[r] == nil {
				rs = append(rs, r)
			}
			claims[r] = append(claims[r], fmt.Sprintf("%q", h.Name))
		}
		for _, r := range rs {
			if l := claims[r]; len(l) > 1 {
				add("binding %q: handlers %s all claim route %s: one handler per kind of message (they would compete for its messages)", b, strings.Join(l, " and "), r)
			}
		}
		policy := declared[b]
		if policy == 0 {
			policy = c.cfg.Unrouted
		}
		if !catchAll && policy == 0 {
			add("binding %q: its routes %s leave other messages unclaimed and no policy is set for them: set BindingConfig.Unrouted or Config.Unrouted (UnroutedDeadLetter or UnroutedAck), or add a handler with the zero Route", b, routeList(rs))
		}
	}
	return problems
}

func routeList(rs []Route) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// routeProblem checks a route's fields.
func routeProblem(r Route) string {
	for _, f := range []struct{ name, v string }{{"Topic", r.Topic}, {"Version", r.Version}, {"ContentType", r.ContentType}} {
		if f.v != strings.TrimSpace(f.v) {
			return f.name + " has leading or trailing space: it would never match"
		}
		if msg := checkText(f.v); msg != "" {
			return f.name + " " + msg + ": it would never match"
		}
	}
	if ct := r.ContentType; ct != "" && (strings.Contains(ct, ";") || !strings.Contains(ct, "/")) {
		return fmt.Sprintf("ContentType %q is not a media type without parameters (type/subtype)", ct)
	}
	return ""
}
