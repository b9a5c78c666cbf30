package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
)

// Defaults of Config.
const (
	DefaultInboxTable    = "txbox_inbox"
	DefaultConcurrency   = 8
	DefaultMaxDeliveries = 10
	DefaultBackoffBase   = time.Second
	DefaultBackoffMax    = 5 * time.Minute
	// DefaultHandlerTimeout is Config.HandlerTimeout's default.
	DefaultHandlerTimeout = 15 * time.Minute
)

// Guarantee is how a handler's effects relate to deliveries.
type Guarantee int

// The delivery guarantees.
const (
	// Inbox: the handler runs in the inbox transaction; its database effects
	// happen exactly once per (handler name, message id) within the inbox's
	// retention.
	Inbox Guarantee = iota + 1
	// AtLeastOnce: the handler runs once per delivery, with no transaction;
	// a redelivered message runs it again.
	AtLeastOnce
)

func (g Guarantee) String() string {
	switch g {
	case Inbox:
		return "inbox"
	case AtLeastOnce:
		return "at-least-once"
	}
	return fmt.Sprintf("Guarantee(%d)", int(g))
}

// Config configures a Consumer. Zero fields take their defaults; negative
// values are an error from New.
type Config struct {
	// Broker opens the handlers' bindings. Required.
	Broker txbox.Subscriber
	// Inbox configures the inbox of every Inbox handler: its table
	// (Schema and Table; create it with package txboxmigrate, InboxTables;
	// default table: DefaultInboxTable, "txbox_inbox"), retention, limits
	// and audit hook.
	Inbox inbox.Config
	// Concurrency is how many messages each handler processes at once; the
	// broker's prefetch is twice that. Default: DefaultConcurrency (8).
	Concurrency int
	// MaxDeliveries is how many deliveries that fail for the message's own
	// reasons (the handler returned an error or panicked, or the database
	// refused its work at the commit: a deferred constraint, a transaction
	// the handler left aborted; see txboxdriver.IsRejected) a message gets
	// before it is dead-lettered. Failures of the database (a lost
	// connection, a server shutting down, a deadlock; see
	// txboxdriver.IsTransient; a bare network failure only when it broke the
	// handler's transaction), also when the handler returns them, retry
	// without ever dead-lettering, as soon as the database answers again,
	// and do not count. The count is this
	// consumer's own, kept in memory per (handler, message id): deliveries
	// before a restart or to another replica do not count, which can only
	// delay a dead letter. Default: DefaultMaxDeliveries (10).
	MaxDeliveries int
	// BackoffBase is the delay before the second delivery of a failed
	// message; it doubles with each delivery up to BackoffMax. Defaults:
	// DefaultBackoffBase (1s), DefaultBackoffMax (5m).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// HandlerTimeout bounds one run of a handler on one message (in a
	// batch, each message's own call). Past it the handler's context is
	// cancelled with ErrHandlerTimeout as its cause, its transaction
	// rolls back, and the delivery fails for the message's own reasons:
	// retried with backoff, dead-lettered after MaxDeliveries. So a
	// handler stuck on a call that never returns (a lock, a remote service
	// without a timeout) frees its worker — and an Ordered handler's key —
	// instead of holding them for good while the keep-alive keeps the
	// message from being redelivered. A handler that ignores its context
	// keeps its worker until it returns. Default: DefaultHandlerTimeout
	// (15m).
	HandlerTimeout time.Duration
	// Logger receives the consumer's logs. Default: slog.Default().
	Logger *slog.Logger
	// Observer receives each delivery and its outcome (see
	// txbox.ConsumerObserver; package txboxprom has a Prometheus one).
	// Default: nil, and then the consumer makes no observer calls.
	Observer txbox.ConsumerObserver
	// Tracer traces each delivery (see txbox.ConsumerTracer; package
	// txboxotel has an OpenTelemetry one): the handler runs in the context
	// it returns. Default: nil, and then the Observer, if it implements
	// txbox.ConsumerTracer; else no tracer calls.
	Tracer txbox.ConsumerTracer
	// Unrouted is what happens to a delivery that no route of its binding
	// claims (see Route), for bindings whose BindingConfig sets none.
	// Default: unset, and then a binding whose routes can leave a delivery
	// unclaimed is a startup error.
	Unrouted Unrouted
	// VersionHeader names the header Route.Version matches. Default:
	// DefaultVersionHeader ("Message-Version").
	VersionHeader string
	// NoKeepAlive turns off the keep-alive: by default, while a delivery
	// is unsettled (queued for a worker, its handler running), the
	// consumer extends the broker's ack deadline a few times per deadline
	// where the Delivery supports it (txbox.DeadlineExtender: JetStream
	// InProgress, Redis Streams), so that a handler longer than AckWait is
	// not redelivered under it. Default: false (keep-alive on).
	NoKeepAlive bool
	// ClaimCheck resolves claim check references (txbox.HeaderClaimCheck):
	// before a handler runs, the consumer gets the payload a message's
	// reference names from it, and the handler sees that payload, without
	// the header. A reference the store does not hold (txbox.ErrClaimNotFound)
	// dead-letters the message at once with the reason; another failure of
	// the store counts toward MaxDeliveries (a transient failure of the
	// consumer's own database does not, see MaxDeliveries). A store with
	// a method Check(ctx) []string (package claimcheck's) is checked at
	// start-up: its problems are the StartupError's. Default: nil, and
	// then a message with a reference is dead-lettered.
	ClaimCheck txbox.ClaimCheck
	// Batch sets how Inbox handlers' deliveries share transactions (see
	// BatchConfig). Default: batches of up to DefaultBatchSize (32),
	// filled for up to DefaultBatchWait (2ms); Size 1 turns it off.
	Batch BatchConfig
}

// HandlerConfig names a handler and says where its messages come from.
type HandlerConfig struct {
	// Name is the handler's identity, required and stable. For an Inbox
	// handler it is the inbox source: receipts are keyed by (Name, message
	// id). It is explicit, not derived from the Go function or type, so
	// that renaming or moving code does not open a new namespace in which
	// every message still within the broker's redelivery or replay horizon
	// would run again. Change it only to deliberately reprocess.
	Name string
	// Binding is where messages come from, in the Subscriber's terms
	// (natsjs: "STREAM/durable"; rabbitmq: the queue). Required. Several
	// handlers may share a binding, each with its own Route.
	Binding string
	// Concurrency overrides Config.Concurrency for this handler. Handlers
	// routed on one binding share its workers: the binding runs the
	// largest Concurrency of its handlers.
	Concurrency int
	// Route selects the deliveries of Binding that this handler claims
	// (several handlers may share a binding, each with its own Route).
	// Default: the zero Route, every delivery no other route claims.
	Route Route
	// MaxDeliveries, BackoffBase and BackoffMax override Config's for this
	// handler (0: Config's).
	MaxDeliveries int
	BackoffBase   time.Duration
	BackoffMax    time.Duration
	// Timeout overrides Config.HandlerTimeout for this handler (0:
	// Config's).
	Timeout time.Duration
	// Batch overrides Config.Batch for this handler, field by field.
	Batch BatchConfig
	// Ordered handles the messages of one key (Message.Key) one at a time,
	// in arrival order, and different keys in parallel up to Concurrency;
	// unkeyed messages run freely. A failed message is retried in process,
	// holding back only its key (see docs/guide/ordering.md). Default: false.
	Ordered bool
	// DeadKey is what an Ordered handler does with a key after one of its
	// messages was dead-lettered. Default: ParkKey.
	DeadKey DeadKeyPolicy
}

// Stats counts what a Consumer did with its deliveries since New.
type Stats struct {
	Handled    int64 // handler ran and succeeded, message ACKed
	Duplicates int64 // inbox found the message already processed; ACKed without running
	Retried    int64 // released for redelivery after a failure (DatabaseFailures included)
	// DatabaseFailures counts the deliveries that failed because the
	// database did (see Config.MaxDeliveries): retried, never
	// dead-lettered, not counted toward MaxDeliveries.
	DatabaseFailures int64
	// TimedOut counts the handler runs cut short by their Timeout
	// (Config.HandlerTimeout): failures of the message (retried, or
	// dead-lettered, and counted there too).
	TimedOut     int64
	DeadLettered int64
	Released     int64 // released unprocessed at Stop
	AckFailed    int64 // settlement calls that failed (the broker redelivers)
	// Unrouted counts the deliveries no route claimed, dead-lettered
	// (also in DeadLettered) or acked per the binding's Unrouted policy.
	Unrouted int64
	// Conflicts counts the transactions that lost a deadlock or a
	// serialization failure and ran again at once (neither a retry nor a
	// database failure unless they lost every time).
	Conflicts int64
	// Batches counts the batch transactions committed (BatchConfig);
	// BatchesFailed those that failed as a whole, whose messages were
	// then handled one by one.
	Batches, BatchesFailed int64
	// ParkedKeys is how many keys the Ordered handlers have parked now
	// (see Consumer.ParkedKeys); ParkedDeadLettered counts the messages
	// dead-lettered without running because their key was parked (also
	// in DeadLettered).
	ParkedKeys, ParkedDeadLettered int64
}

type handler[TTx any] struct {
	HandlerConfig
	route     Route // HandlerConfig.Route, normalised
	guarantee Guarantee
	txFn      func(ctx context.Context, tx TTx, msg Message) error
	fn        func(ctx context.Context, msg Message) error
}

// Consumer receives messages from a broker and runs the registered handler
// of each binding. Register handlers, then Start; Stop shuts it down. A
// Consumer runs once: make a new one to start again.
type Consumer[TTx any] struct {
	drv      txboxdriver.Driver[TTx]
	cfg      Config
	log      *slog.Logger
	mu       sync.Mutex
	handlers []*handler[TTx]
	ib       *inbox.Inbox[TTx]
	started  bool

	fetchCtx    context.Context    // ends when Stop stops fetching
	fetchCancel context.CancelFunc // stops fetching
	hardCancel  context.CancelFunc // cancels in-flight handlers
	wg          sync.WaitGroup
	stopped     chan struct{}
	stopOnce    sync.Once

	failures *failures // message-caused failures, per (handler, message id)
	probe    *dbProbe  // when the database answers again; nil without a database
	routing  routing
	keys     keyRegistry

	handled, duplicates, retried, dbFailed, timedOut, dead, released, ackFailed atomic.Int64
	batches, batchesFailed, conflicts                                           atomic.Int64
}

// New returns a Consumer whose Inbox handlers run in transactions of drv.
// drv may be nil when every handler is AtLeastOnce (an Inbox handler
// registered without a database is reported by Start). New touches neither
// the database nor the broker.
func New[TTx any](drv txboxdriver.Driver[TTx], cfg Config) (*Consumer[TTx], error) {
	if cfg.Broker == nil {
		return nil, fmt.Errorf("%w: consumer: Broker is required", ErrInvalidConfig)
	}
	if cfg.Concurrency < 0 || cfg.MaxDeliveries < 0 || cfg.BackoffBase < 0 || cfg.BackoffMax < 0 || cfg.Batch.Size < 0 || cfg.Batch.Wait < 0 || cfg.HandlerTimeout < 0 {
		return nil, fmt.Errorf("%w: consumer: negative Concurrency, MaxDeliveries, backoff, Batch or HandlerTimeout", ErrInvalidConfig)
	}
	if cfg.Inbox.Table == "" {
		cfg.Inbox.Table = DefaultInboxTable
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.MaxDeliveries == 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.HandlerTimeout == 0 {
		cfg.HandlerTimeout = DefaultHandlerTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.VersionHeader == "" {
		cfg.VersionHeader = DefaultVersionHeader
	}
	if cfg.Tracer == nil {
		cfg.Tracer, _ = cfg.Observer.(txbox.ConsumerTracer)
	}
	c := &Consumer[TTx]{drv: drv, cfg: cfg, log: cfg.Logger, stopped: closedChan(),
		failures: newFailures(2*cfg.BackoffMax + time.Minute)}
	if drv != nil {
		icfg := cfg.Inbox
		if icfg.Logger == nil {
			icfg.Logger = cfg.Logger
		}
		if icfg.Hook == nil {
			// The consumer logs every failed delivery itself, with what it
			// does next: the default audit log skips them, so that each
			// is logged once.
			audit := inbox.LogHook(icfg.Logger)
			icfg.Hook = func(ctx context.Context, e inbox.Event) {
				if e.Kind != inbox.EventHandleFailed {
					audit(ctx, e)
				}
			}
		}
		ib, err := inbox.New(drv, icfg)
		if err != nil {
			return nil, fmt.Errorf("consumer: %w", err)
		}
		c.ib = ib
		c.probe = &dbProbe{pool: drv.Pool()}
	}
	return c, nil
}

// HandleInbox registers fn as the Inbox handler of h.Binding: fn runs in
// the inbox transaction tx, at most once per message id committed. fn must
// not commit or roll back tx. Returning an error rolls everything back and
// the message is retried; Permanent(err) dead-letters it at once. An error
// that is, or wraps (%w), a failure of the database (txboxdriver.IsTransientFor)
// never counts toward MaxDeliveries, but a bare network failure
// (txboxdriver.IsNetwork) only when tx could not roll back after it: else it
// is fn's own call to another service failing.
// Problems with h are reported by Start, all at once.
func (c *Consumer[TTx]) HandleInbox(h HandlerConfig, fn func(ctx context.Context, tx TTx, msg Message) error) error {
	return c.register(&handler[TTx]{HandlerConfig: h, guarantee: Inbox, txFn: fn})
}

// HandleAtLeastOnce registers fn as the AtLeastOnce handler of h.Binding:
// fn runs once per delivery, outside any transaction, and must tolerate
// duplicates. Errors are treated as in HandleInbox.
func (c *Consumer[TTx]) HandleAtLeastOnce(h HandlerConfig, fn func(ctx context.Context, msg Message) error) error {
	return c.register(&handler[TTx]{HandlerConfig: h, guarantee: AtLeastOnce, fn: fn})
}

func (c *Consumer[TTx]) register(h *handler[TTx]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	h.route = h.Route.normal()
	c.handlers = append(c.handlers, h)
	return nil
}

// Validate checks the handlers against each other, the database and the
// broker, and returns a *StartupError listing every problem, or nil. Start
// calls it.
func (c *Consumer[TTx]) Validate(ctx context.Context) error {
	c.mu.Lock()
	hs := append([]*handler[TTx](nil), c.handlers...)
	binds := append([]BindingConfig(nil), c.routing.binds...)
	c.mu.Unlock()
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(hs) == 0 {
		add("no handler is registered")
	}
	names := map[string]int{}
	bindings := map[string][]string{}
	needInbox := false
	for i, h := range hs {
		label := fmt.Sprintf("handler %q", h.Name)
		if h.Name == "" {
			label = fmt.Sprintf("handler #%d", i+1)
			add("%s has no Name (the stable identity of its inbox namespace)", label)
		} else if msg := checkName(h.Name); msg != "" {
			add("%s: name %s", label, msg)
		}
		names[h.Name]++
		if names[h.Name] == 2 && h.Name != "" {
			add("handler name %q is registered more than once (names key the inbox: two handlers would share receipts)", h.Name)
		}
		if h.Binding == "" {
			add("%s has no Binding", label)
		} else if msg := checkText(h.Binding); msg != "" {
			add("%s: binding %q %s", label, h.Binding, msg)
		} else {
			bindings[h.Binding] = append(bindings[h.Binding], label)
		}
		if h.Concurrency < 0 || h.MaxDeliveries < 0 || h.BackoffBase < 0 || h.BackoffMax < 0 || h.Timeout < 0 {
			add("%s has a negative Concurrency, MaxDeliveries, backoff or Timeout", label)
		}
		if msg := checkBatch(label, h.Batch); msg != "" {
			add("%s", msg)
		}
		if msg := checkOrdered(h.HandlerConfig); msg != "" {
			add("%s %s", label, msg)
		}
		switch h.guarantee {
		case Inbox:
			needInbox = true
			if h.txFn == nil {
				add("%s has no function", label)
			}
			if c.drv == nil {
				add("%s has the inbox guarantee but the consumer has no database (New was given a nil driver); it will not fall back to at-least-once", label)
			}
		case AtLeastOnce:
			if h.fn == nil {
				add("%s has no function", label)
			}
		}
	}
	var bs []string
	for b := range bindings {
		bs = append(bs, b)
	}
	sort.Strings(bs)
	problems = append(problems, c.checkRoutes(hs, binds)...)
	problems = append(problems, checkOrderedRoutes(hs)...)
	for _, b := range bs {
		if err := c.cfg.Broker.CheckBinding(ctx, b); err != nil {
			add("binding %q (%s): %v", b, strings.Join(bindings[b], ", "), err)
		}
	}
	if ck, ok := c.cfg.ClaimCheck.(checker); ok {
		for _, p := range ck.Check(ctx) {
			add("claim check store: %s", p)
		}
	}
	if needInbox && c.drv != nil {
		problems = append(problems, c.checkInbox(ctx)...)
		problems = append(problems, c.checkHorizons(ctx, hs)...)
	}
	if len(problems) > 0 {
		return &StartupError{Component: "consumer", Problems: problems}
	}
	return nil
}

// checker is a ClaimCheck store that checks itself at start-up (package
// claimcheck's Store: its table and migrations).
type checker interface {
	Check(ctx context.Context) []string
}

// checkName applies the inbox's rules for a source.
func checkName(s string) string {
	if len(s) > inbox.DefaultMaxSourceLen {
		return fmt.Sprintf("is %d bytes, over %d", len(s), inbox.DefaultMaxSourceLen)
	}
	return checkText(s)
}

// checkText refuses what no broker name or message field holds: invalid
// UTF-8 and control characters.
func checkText(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fmt.Sprintf("contains control character %#x", c)
		}
	}
	return ""
}

// checkInbox verifies that the inbox table's migrations are all applied
// and that the table is there.
func (c *Consumer[TTx]) checkInbox(ctx context.Context) []string {
	table := c.cfg.Inbox.Table
	m, err := txboxmigrate.New(c.drv, txboxmigrate.Config{Schema: c.cfg.Inbox.Schema, NoOutbox: true, InboxTables: []string{table}, Logger: c.log})
	if err != nil {
		return []string{fmt.Sprintf("inbox table %q: %v", table, err)}
	}
	problems, note := m.Startup(ctx)
	if note != "" {
		c.log.Warn("txbox consumer: " + note)
	}
	return problems
}

// Start validates the configuration (see Validate) and, when it is sound,
// subscribes every handler's binding and starts receiving. ctx bounds
// start-up only; Stop ends the consumer.
func (c *Consumer[TTx]) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return ErrStarted
	}
	c.mu.Unlock()
	if err := c.Validate(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrStarted
	}
	var subs []txbox.Subscription
	bs := c.bindings()
	for _, b := range bs {
		s, err := c.subscribe(ctx, b, c.prefetch(b))
		if err != nil {
			for _, s := range subs {
				_ = s.Close(ctx)
			}
			return fmt.Errorf("txbox/consumer: subscribe %q for handler(s) %s: %w", b.name, b.label(), err)
		}
		subs = append(subs, s)
	}
	c.started = true
	c.stopped = make(chan struct{})
	fetchCtx, fetchCancel := context.WithCancel(context.WithoutCancel(ctx))
	hardCtx, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	c.fetchCtx, c.fetchCancel, c.hardCancel = fetchCtx, fetchCancel, hardCancel
	for i, b := range bs {
		c.wg.Add(1)
		go c.run(fetchCtx, hardCtx, b, subs[i], b.concurrency)
	}
	go func(stopped chan struct{}) {
		c.wg.Wait()
		close(stopped)
	}(c.stopped)
	return nil
}

// Stop stops fetching, lets the handlers in flight finish until ctx ends,
// then cancels those still running (their transactions roll back) and
// releases every unfinished message for redelivery. It returns ctx's error
// if it had to cancel handlers.
func (c *Consumer[TTx]) Stop(ctx context.Context) error {
	c.mu.Lock()
	started, stopped := c.started, c.stopped
	c.mu.Unlock()
	if !started {
		return nil
	}
	c.stopOnce.Do(c.fetchCancel)
	select {
	case <-stopped:
		c.hardCancel()
		return nil
	case <-ctx.Done():
		c.hardCancel()
		<-stopped
		return ctx.Err()
	}
}

// Stopped is closed whenever the consumer is not running: before Start,
// and once it has stopped.
func (c *Consumer[TTx]) Stopped() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Stats returns the counters.
func (c *Consumer[TTx]) Stats() Stats {
	return Stats{
		Handled: c.handled.Load(), Duplicates: c.duplicates.Load(), Retried: c.retried.Load(),
		DatabaseFailures: c.dbFailed.Load(), TimedOut: c.timedOut.Load(), DeadLettered: c.dead.Load(), Released: c.released.Load(), AckFailed: c.ackFailed.Load(),
		Unrouted: c.routing.unrouted.Load(), Batches: c.batches.Load(), BatchesFailed: c.batchesFailed.Load(), Conflicts: c.conflicts.Load(),
		ParkedKeys: c.keys.parkedCount(), ParkedDeadLettered: c.keys.parkedDead.Load(),
	}
}

// run is one binding's fetch loop and its n workers.
func (c *Consumer[TTx]) run(fetchCtx, hardCtx context.Context, b *binding[TTx], sub txbox.Subscription, n int) {
	defer c.wg.Done()
	work := make(chan txbox.Delivery)
	var gate *keyGate // Ordered: one delivery per key at a time (ordered.go)
	if b.ordered() {
		gate = c.keys.open(b.single.Name, 2*n)
		go gate.watch(fetchCtx, keyHoldLimit)
	}
	var ls *keyLanes // batched: one worker at a time per key (lanes.go)
	size, wait := c.bindingBatching(b)
	if gate == nil && size > 1 {
		ls = newKeyLanes(n, c.prefetch(b))
	}
	var workers sync.WaitGroup
	for i := range n {
		workers.Add(1)
		go func() {
			defer workers.Done()
			if gate != nil {
				c.orderedWorker(fetchCtx, hardCtx, b.single, gate, work)
				return
			}
			if ls != nil {
				c.runBatches(hardCtx, b, ls, ls.all[i], size, wait)
				return
			}
			for d := range work {
				c.dispatch(hardCtx, b, d)
			}
		}()
	}
	backoff := 10 * time.Millisecond
	for {
		d, err := sub.Next(fetchCtx)
		if err != nil {
			if fetchCtx.Err() != nil {
				break
			}
			c.log.Warn("txbox/consumer: receive failed; retrying", "binding", b.name, "err", err, "wait", backoff)
			select {
			case <-time.After(backoff):
			case <-fetchCtx.Done():
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		d = c.keepAlive(d)
		if gate != nil {
			if run, err := gate.admit(fetchCtx, d, d.Message().Key); err != nil || !run {
				if run {
					c.release(d)
				}
				continue // queued behind its key
			}
		}
		if ls != nil {
			if !ls.put(fetchCtx, d) {
				c.release(d)
			}
			continue
		}
		select {
		case work <- d:
		case <-fetchCtx.Done():
			c.release(d)
		}
	}
	close(work)
	if ls != nil {
		for _, d := range ls.close() {
			c.release(d)
		}
	}
	workers.Wait()
	if gate != nil {
		for _, d := range gate.drain() {
			c.release(d)
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sub.Close(closeCtx); err != nil {
		c.log.Warn("txbox/consumer: close subscription", "binding", b.name, "err", err)
	}
}

func (c *Consumer[TTx]) release(d txbox.Delivery) {
	c.released.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Retry(ctx, 0); err != nil {
		c.ackFailed.Add(1)
	}
}

// process runs h on one delivery and settles it.
func (c *Consumer[TTx]) process(ctx context.Context, h *handler[TTx], d txbox.Delivery) {
	c.processWith(ctx, h, d, func(ctx context.Context, msg Message) (bool, error) { return c.invoke(ctx, h, msg) })
}

// processWith runs h on one delivery through run (alone: invoke; in a
// batch: see processBatch) and settles it. Each failure is logged once,
// here.
func (c *Consumer[TTx]) processWith(ctx context.Context, h *handler[TTx], d txbox.Delivery, run func(ctx context.Context, msg Message) (dup bool, err error)) {
	msg := d.Message()
	msg.Binding = h.Binding
	var start time.Time
	result := txbox.HandleFailed
	if obs := c.cfg.Observer; obs != nil {
		obs.Received(h.Name, msg.Deliveries)
		start = time.Now()
		defer func() { obs.Handled(h.Name, result, time.Since(start)) }()
	}
	var err error
	if tr := c.cfg.Tracer; tr != nil {
		var end func(txbox.HandleResult, error)
		ctx, end = tr.StartProcess(ctx, h.Name, msg)
		defer func() { end(result, err) }()
	}
	var dup bool
	claimed := false // the claim check reference could not be resolved
	if msg, err = c.resolveClaim(ctx, msg); err != nil {
		claimed = true
	} else {
		dup, err = run(ctx, msg)
	}
	// A handler that ran past its timeout failed for the message's own
	// reasons, whatever its cancelled statement said: counted, never
	// retried as a database failure without end.
	timedOut := errors.Is(err, ErrHandlerTimeout)
	if timedOut {
		c.timedOut.Add(1)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	log := c.log.With("handler", h.Name, "message_id", msg.ID, "deliveries", msg.Deliveries)
	settle := func(what string, err error) {
		if err != nil {
			c.ackFailed.Add(1)
			log.Warn("txbox/consumer: "+what+" failed; the broker will redeliver", "err", err)
		}
	}
	deadLetter := func(what string, err error) {
		log.Error("txbox/consumer: dead-lettering "+what, "err", err)
		result = txbox.HandleDeadLettered
		c.dead.Add(1)
		c.failures.forget(h.Name, msg.ID)
		settle("dead-letter", d.DeadLetter(sctx, err))
	}
	switch {
	case err == nil:
		c.failures.forget(h.Name, msg.ID)
		if dup {
			result = txbox.HandleDuplicate
			c.duplicates.Add(1)
		} else {
			result = txbox.HandleFresh
			c.handled.Add(1)
		}
		settle("ack", d.Ack(sctx))
	case ctx.Err() != nil:
		// Stop's deadline passed: the transaction rolled back.
		result = txbox.HandleReleased
		c.released.Add(1)
		settle("release", d.Retry(sctx, 0))
	case IsPermanent(err), errors.Is(err, inbox.ErrInvalidInput):
		deadLetter("a message that cannot succeed", err)
	case !timedOut && ((claimed && txboxdriver.IsTransientFor(c.drv, err)) || (!claimed && c.databaseFailed(h, err))):
		// The database failed, not the message: retry, never dead-letter,
		// and do not count it toward MaxDeliveries.
		log.Warn("txbox/consumer: the database failed; retrying, not counted toward MaxDeliveries", "err", err)
		noteFailure(d, err, false)
		c.dbFailed.Add(1)
		c.retried.Add(1)
		settle("retry", d.Retry(sctx, c.databaseRetryDelay(ctx, h, msg.Deliveries)))
	default:
		n := msg.Deliveries // without an id, the broker's count is all there is
		if msg.ID != "" {
			n = c.failures.add(h.Name, msg.ID, time.Now())
		}
		if n >= orDefault(h.MaxDeliveries, c.cfg.MaxDeliveries) {
			deadLetter(fmt.Sprintf("after %d failed deliveries", n), err)
			return
		}
		delay := c.backoff(h, msg.Deliveries)
		log.Warn("txbox/consumer: handler failed; retrying", "err", err, "failures", n, "delay", delay)
		noteFailure(d, err, true)
		c.retried.Add(1)
		settle("retry", d.Retry(sctx, delay))
	}
}

// noteFailure tells an Ordered handler's delivery (heldDelivery) how it
// failed before its retry: counted (toward MaxDeliveries: the message's own
// failure) or not (the database's).
func noteFailure(d txbox.Delivery, err error, counted bool) {
	if f, ok := d.(interface{ failed(error, bool) }); ok {
		f.failed(err, counted)
	}
}

// resolveClaim returns msg with the payload its claim check reference
// names (txbox.HeaderClaimCheck, any case) and without that header; msg
// itself when it has none. A reference that cannot ever be resolved (not
// in the store, no store configured) is a Permanent error.
func (c *Consumer[TTx]) resolveClaim(ctx context.Context, msg Message) (Message, error) {
	name, ref, ok := claimHeader(msg.Headers)
	if !ok {
		return msg, nil
	}
	if c.cfg.ClaimCheck == nil {
		return msg, Permanent(fmt.Errorf("claim check %s: %q: the consumer has no ClaimCheck store (consumer.Config.ClaimCheck)", txbox.HeaderClaimCheck, ref))
	}
	payload, err := c.cfg.ClaimCheck.Get(ctx, ref)
	if errors.Is(err, txbox.ErrClaimNotFound) {
		return msg, Permanent(fmt.Errorf("claim check %s: %q: %w", txbox.HeaderClaimCheck, ref, err))
	}
	if err != nil {
		return msg, fmt.Errorf("claim check %s: %q: %w", txbox.HeaderClaimCheck, ref, err)
	}
	hs := make(map[string]string, len(msg.Headers)-1)
	for k, v := range msg.Headers {
		if k != name {
			hs[k] = v
		}
	}
	msg.Headers, msg.Payload = hs, payload
	return msg, nil
}

// claimHeader finds the claim check header in headers, in any case.
func claimHeader(headers map[string]string) (name, ref string, ok bool) {
	if v, ok := headers[txbox.HeaderClaimCheck]; ok {
		return txbox.HeaderClaimCheck, v, true
	}
	for k, v := range headers {
		if strings.EqualFold(k, txbox.HeaderClaimCheck) {
			return k, v, true
		}
	}
	return "", "", false
}

// databaseFailed tells a failure of the database from the message's. The
// database's: an error the driver classifies as transient
// (txboxdriver.IsTransientFor: a lost connection, a server shutting down or out
// of resources, a deadlock or serialization failure), wherever it came
// from — the inbox, the commit, the handler's statements or Outbox.Add,
// wrapped or not — and a failure of the inbox's own statements (begin, the
// receipt, the commit) that the database did not refuse for the message's
// data (txboxdriver.IsRejectedFor). The message's: the handler's errors and
// panics, and the inbox's statements refused for what the handler did — a
// deferred constraint failing at COMMIT, a COMMIT of a transaction the
// handler left aborted.
//
// A bare network failure (txboxdriver.IsNetwork: a net.Error, a reset
// connection) in the handler's own error is the database's only when the
// handler's transaction could not roll back after it (its connection
// broke: inbox.HandlerError.Rollback); otherwise it is the handler's call
// to another service (an HTTP request that timed out), and counts. An
// AtLeastOnce handler has no connection of the consumer's: its network
// failures count.
func (c *Consumer[TTx]) databaseFailed(h *handler[TTx], err error) bool {
	var herr *inbox.HandlerError
	var panicked *PanicError
	handlers := h.guarantee != Inbox || errors.As(err, &herr) || errors.As(err, &panicked)
	if txboxdriver.IsTransientFor(c.drv, err) {
		return !handlers || txboxdriver.IsDatabaseTransientFor(c.drv, err) || (herr != nil && herr.Rollback != nil)
	}
	return !handlers && !txboxdriver.IsRejectedFor(c.drv, err)
}

// maxDatabaseRetryDelay caps the wait before retrying a delivery that
// failed because the database did while the database answers.
const maxDatabaseRetryDelay = time.Second

// databaseRetryDelay waits, for an Inbox handler, until the database
// answers (c.probe: every worker whose delivery failed waits on the same
// probe), and returns the delay for the retry: none if the database was
// out (it is back), else h's backoff for the delivery capped at
// maxDatabaseRetryDelay (the database answers but the work failed: a
// conflict that outlived its immediate retries, a full disk). An
// AtLeastOnce handler's failure is not the consumer's database's: it
// backs off as a handler error does, without counting. Stop ends the wait
// (the delivery is released).
func (c *Consumer[TTx]) databaseRetryDelay(ctx context.Context, h *handler[TTx], deliveries int) time.Duration {
	if h.guarantee != Inbox || c.probe == nil {
		return c.backoff(h, deliveries)
	}
	if c.fetchCtx != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(c.fetchCtx, cancel)()
	}
	down, ok := c.probe.wait(ctx)
	if down || !ok {
		return 0
	}
	return min(c.backoff(h, deliveries), maxDatabaseRetryDelay)
}

// maxConflictRetries is how many more times a transaction that lost a
// deadlock or a serialization failure (txboxdriver.IsConflictFor) runs again at
// once, before its messages go the way of other database failures.
const maxConflictRetries = 3

// againOnConflict runs fn, and again at once while it fails with a
// conflict, up to maxConflictRetries more times: a deadlock costs the
// database's detection time, not a backoff.
func (c *Consumer[TTx]) againOnConflict(ctx context.Context, fn func() (inbox.Result, error)) (inbox.Result, error) {
	res, err := fn()
	for try := 0; try < maxConflictRetries && c.conflict(ctx, err); try++ {
		c.conflicts.Add(1)
		res, err = fn()
	}
	return res, err
}

// conflict reports whether err is a conflict to run again at once: not
// when ctx ended, nor after the handler's timeout.
func (c *Consumer[TTx]) conflict(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && txboxdriver.IsConflictFor(c.drv, err) && !IsPermanent(err) && !errors.Is(err, ErrHandlerTimeout)
}

// invoke runs h's function, recovering a panic as a *PanicError.
func (c *Consumer[TTx]) invoke(ctx context.Context, h *handler[TTx], msg Message) (dup bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v}
		}
	}()
	if h.guarantee == AtLeastOnce {
		return false, c.timed(ctx, h, func(ctx context.Context) error { return h.fn(ctx, msg) })
	}
	if msg.ID == "" {
		return false, Permanent(errors.New("message has no id (Nats-Msg-Id / message_id): the inbox cannot deduplicate it"))
	}
	meta := map[string]any{"topic": msg.Topic, "binding": msg.Binding, "deliveries": msg.Deliveries}
	res, err := c.againOnConflict(ctx, func() (inbox.Result, error) {
		return c.ib.Handle(ctx, h.Name, msg.ID, meta, func(ctx context.Context, tx TTx) error {
			return c.timed(ctx, h, func(ctx context.Context) error { return h.txFn(ctx, tx, msg) })
		})
	})
	return res == inbox.Duplicate, err
}

// timed runs fn, a call of h's function, under h's timeout
// (Config.HandlerTimeout): its context ends with the cause
// ErrHandlerTimeout, and an error it returns after that wraps
// ErrHandlerTimeout.
func (c *Consumer[TTx]) timed(ctx context.Context, h *handler[TTx], fn func(ctx context.Context) error) error {
	timeout := orDefault(h.Timeout, c.cfg.HandlerTimeout)
	rctx, cancel := context.WithTimeoutCause(ctx, timeout, ErrHandlerTimeout)
	defer cancel()
	err := fn(rctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(rctx), ErrHandlerTimeout) {
		return fmt.Errorf("%w (%v): %w", ErrHandlerTimeout, timeout, err)
	}
	return err
}

// backoff is the delay after the given delivery of h's message failed.
func (c *Consumer[TTx]) backoff(h *handler[TTx], deliveries int) time.Duration {
	return backoff.Nth(orDefault(h.BackoffBase, c.cfg.BackoffBase), orDefault(h.BackoffMax, c.cfg.BackoffMax), deliveries)
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
