package txboxui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/internal/hostcheck"
	"github.com/txbox/txbox/internal/relayseam"
	"github.com/txbox/txbox/relay"
)

// Sizes of the values shown: the lists show at most ListClip bytes of a
// value (an ellipsis and its full length tell it was cut); a dead message's
// own page, dead/SEQ, shows each value whole up to ValueCap bytes.
const (
	ListClip = 512
	ValueCap = 64 << 10
)

// Defaults of Config.
const (
	DefaultInterval  = 5 * time.Second
	DefaultSamples   = 120
	DefaultDeadLimit = 100
	DefaultTimeout   = 5 * time.Second
	// DefaultScheduledLimit is how many scheduled messages are listed.
	DefaultScheduledLimit = 100
)

// Backlog is one reading of an outbox table: the undelivered rows by
// disjoint state, the dead rows and the oldest ages.
type Backlog struct {
	Pending int64 // undelivered, never rejected, not parked
	// Scheduled is how many of Pending are scheduled and not yet due
	// (txbox.Message.DeliverAt); -1 when the source does not count them.
	Scheduled int64
	Retrying  int64 // undelivered, rejected at least once, not dead, not parked
	Parked    int64 // undelivered, waiting behind a dead row of their key
	Dead      int64
	// ParkedKeys is how many ordering keys dead rows park; -1 when the
	// source does not count them.
	ParkedKeys int64
	// OldestClaimableAge is the age of the oldest row a claim could take
	// now (due and not parked); zero when there is none.
	OldestClaimableAge time.Duration
	// OldestPendingAge is the age of the oldest undelivered row, parked
	// and retrying ones included; zero when unknown or none.
	OldestPendingAge time.Duration
	// Topics are the topics with the most undelivered rows, most first;
	// nil when the source does not count them.
	Topics []TopicBacklog
	// Upkeep is the table's upkeep on PostgreSQL, nil elsewhere or when
	// it could not be read.
	Upkeep *Upkeep
}

// Upkeep is what keeps VACUUM from the outbox table (docs/guide/operations.md):
// the database's oldest open transaction, and the row versions to vacuum
// waiting.
type Upkeep struct {
	OldestTransactionAge time.Duration // 0: none
	DeadRows             int64
}

// TopicBacklog counts the undelivered rows of one topic.
type TopicBacklog struct {
	Topic       string `json:"topic"`
	Undelivered int64  `json:"undelivered"` // dead ones included
	Dead        int64  `json:"dead"`
}

// BacklogFunc reads the backlog (one query per call).
type BacklogFunc func(ctx context.Context) (Backlog, error)

// InspectBacklog reads the backlog through in.Backlog (package inspect:
// counts by state, ages and top topics).
func InspectBacklog(in *inspect.Inspector) BacklogFunc {
	return func(ctx context.Context) (Backlog, error) {
		b, err := in.Backlog(ctx)
		if err != nil {
			return Backlog{}, err
		}
		out := Backlog{Pending: b.Pending, Scheduled: b.Scheduled, Retrying: b.Retrying, Parked: b.Parked, Dead: b.Dead, ParkedKeys: b.ParkedKeys,
			OldestClaimableAge: b.OldestClaimableAge, OldestPendingAge: b.OldestPendingAge, Topics: []TopicBacklog{}}
		for _, t := range b.Topics {
			out.Topics = append(out.Topics, TopicBacklog{Topic: t.Topic, Undelivered: t.Undelivered, Dead: t.Dead})
		}
		if t, err := in.Table(ctx); err == nil { // PostgreSQL only
			out.Upkeep = &Upkeep{OldestTransactionAge: t.OldestTransaction, DeadRows: t.DeadRows}
		}
		return out, nil
	}
}

// RelayBacklog reads the backlog of r's table as r's Observer samples it
// (one query, without top topics); r need not be running.
func RelayBacklog(r *relay.Relay) BacklogFunc {
	return func(ctx context.Context) (Backlog, error) {
		s := relayseam.Sample(ctx, r).(txbox.RelaySample)
		if s.Err != nil {
			return Backlog{}, s.Err
		}
		b := Backlog{Pending: s.Pending, Scheduled: -1, Retrying: s.Retrying, Parked: s.Parked, Dead: s.Dead, ParkedKeys: -1, OldestClaimableAge: s.OldestClaimableAge}
		if s.Upkeep {
			b.Upkeep = &Upkeep{OldestTransactionAge: s.OldestTransactionAge, DeadRows: s.DeadRows}
		}
		return b, nil
	}
}

// ScheduledFunc lists up to limit messages scheduled and not yet due
// (txbox.Message.DeliverAt), oldest first, and whether more are.
type ScheduledFunc func(ctx context.Context, limit int) (rows []inspect.Row, more bool, err error)

// InspectScheduled lists the scheduled messages through in.Page
// (inspect.Filter.Scheduled).
func InspectScheduled(in *inspect.Inspector) ScheduledFunc {
	return func(ctx context.Context, limit int) ([]inspect.Row, bool, error) {
		return in.Page(ctx, inspect.Filter{Scheduled: true, Limit: limit})
	}
}

// CancelFunc discards the undelivered message with the message id id,
// as txbox.Outbox.CancelNoTx does: how many rows it discarded, or why
// none (txbox.ErrDelivered, ErrMessageDead, ErrInFlight,
// ErrMessageNotFound).
type CancelFunc func(ctx context.Context, id string) (int, error)

// RelayRef names a relay to show: one in this process (Current) or one in
// another process that serves its readiness over HTTP (Readyz).
type RelayRef struct {
	Name string
	// Publisher says how the relay publishes, shown beside its name: e.g.
	// "Kafka, transactional id orders-relay-1" (txbox relay
	// --kafka-transactional-id); "": not shown. The relay does not say it
	// itself: the program that made its publisher does.
	Publisher string
	// Current returns the relay running now in this process, or nil when
	// none is (shown as not running).
	Current func() *relay.Relay
	// Readyz, instead of Current, is the URL of the readiness endpoint of
	// a relay in another process (txbox relay --http ADDR serves
	// http://ADDR/readyz): the panel shows each of its checks (one per
	// store) from there, without counters.
	Readyz string
}

// InboxRef names an inbox table to show; Stats is its Inbox.Stats method.
type InboxRef struct {
	Name  string
	Stats func(ctx context.Context) ([]inbox.SourceStats, error)
}

// ClaimCheckRef names a claim check table to show; Stats reads its
// figures as a sweep with its retention sees them (StoreClaimCheck).
type ClaimCheckRef struct {
	Name  string
	Stats func(ctx context.Context) (claimcheck.Stats, error)
	// Retention is the sweep's retention, shown beside the figures; 0:
	// not shown.
	Retention time.Duration
}

// StoreClaimCheck shows the claim check table of store, whose sweep (the
// relay's cleanup, relay.Config.ClaimChecks, or txbox claimcheck
// sweep) runs with retention.
func StoreClaimCheck(name string, store *claimcheck.Store, retention time.Duration) ClaimCheckRef {
	return ClaimCheckRef{Name: name, Retention: retention, Stats: func(ctx context.Context) (claimcheck.Stats, error) {
		return store.Stats(ctx, retention)
	}}
}

// Config configures the dashboard. Every source is optional: a section
// whose source is nil is not shown.
type Config struct {
	// Title heads the page, e.g. the table's name. Never put a database URL
	// here. Default: "txbox".
	Title string
	// Backlog reads the backlog, e.g. InspectBacklog. Default: RelayBacklog of the first relay
	// of Relays that is running, else none.
	Backlog BacklogFunc
	// Dead lists, redrives and discards the dead messages.
	Dead *dead.Letters
	// Inboxes are the inbox tables whose receipts are counted per source.
	Inboxes []InboxRef
	// ClaimChecks are the claim check tables whose stored payloads are
	// shown: count, bytes, oldest age, those not released, what the next
	// sweep deletes (one scan of the table per reading).
	ClaimChecks []ClaimCheckRef
	// Scheduled lists the messages scheduled and not yet due, with their
	// due times, apart from the backlog's figures (e.g. InspectScheduled).
	Scheduled ScheduledFunc
	// ScheduledLimit is how many scheduled messages are listed. Default:
	// DefaultScheduledLimit (100).
	ScheduledLimit int
	// Cancel discards a scheduled message before it is due (e.g. an
	// Outbox's CancelNoTx): a Cancel button on each scheduled message.
	// Not offered when ReadOnly.
	Cancel CancelFunc
	// DLQ are the consumer bindings whose dead letters the panel at
	// dlq lists, shows, redrives and discards.
	DLQ []DLQRef
	// Relays are the relays whose state and counters are shown; their
	// published counters give the throughput.
	Relays []RelayRef
	// Token, when set, is required on every request: as the password of
	// HTTP basic auth (any user name) or as "Authorization: Bearer TOKEN".
	// Without it, every request whose Host header is not loopback nor one
	// of AllowedHosts is refused (421), and mutating actions are refused to
	// clients that are not on loopback. A Token of white space only or
	// with a control character is refused; CheckToken also asks for
	// MinTokenLen bytes off loopback. Default: "" (none).
	Token string
	// AllowedHosts are the hosts, besides loopback names and addresses,
	// that a request without Token may name in its Host header: the name
	// a reverse proxy forwards, e.g. "dash.internal" (any port) or
	// "dash.internal:8443". A request from a page whose name was rebound
	// to loopback (DNS rebinding) names its own host, and is refused.
	// Default: none.
	AllowedHosts []string
	// ReadOnly hides the redrive, discard and cancel buttons and refuses
	// them.
	ReadOnly bool
	// Interval is how often the figures are read (at most once per
	// Interval, however many browsers watch) and a sample is added to the
	// history. Default: DefaultInterval (5s).
	Interval time.Duration
	// Samples is how many samples the in-memory history keeps. Default:
	// DefaultSamples (120: ten minutes at 5s).
	Samples int
	// DeadLimit is how many dead messages are listed. Default:
	// DefaultDeadLimit (100).
	DeadLimit int
	// Timeout bounds one reading of the figures and one action. Default:
	// DefaultTimeout (5s).
	Timeout time.Duration
	// Logger receives the actions taken and the errors met. Default:
	// slog.Default().
	Logger *slog.Logger
}

// Handler is the dashboard: an http.Handler. It is safe for concurrent use.
type Handler struct {
	cfg  Config
	mux  *http.ServeMux
	csrf string
	cop  *http.CrossOriginProtection
	log  *slog.Logger

	parent *Stores // the Stores whose New made it, or nil

	refreshMu sync.Mutex // held while reading the figures
	mu        sync.Mutex // guards the fields below
	snap      *State
	history   []Sample // ring, oldest first once full
	next      int
	full      bool
}

// New returns the dashboard for cfg. It reads nothing until the first
// request or Run.
func New(cfg Config) (*Handler, error) {
	if cfg.Interval < 0 || cfg.Samples < 0 || cfg.DeadLimit < 0 || cfg.ScheduledLimit < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: txboxui: Interval, Samples, DeadLimit, ScheduledLimit and Timeout must not be negative", txbox.ErrInvalidConfig)
	}
	if err := checkAccess(cfg.Token, cfg.AllowedHosts); err != nil {
		return nil, err
	}
	for _, r := range cfg.Relays {
		if (r.Current == nil) == (r.Readyz == "") {
			return nil, fmt.Errorf("%w: txboxui: relay %q needs Current or Readyz, not both", txbox.ErrInvalidConfig, r.Name)
		}
		if r.Readyz != "" {
			if u, err := url.Parse(r.Readyz); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("%w: txboxui: relay %q: Readyz %q is not an http(s) URL", txbox.ErrInvalidConfig, r.Name, r.Readyz)
			}
		}
	}
	for _, ib := range cfg.Inboxes {
		if ib.Stats == nil {
			return nil, fmt.Errorf("%w: txboxui: inbox %q has no Stats", txbox.ErrInvalidConfig, ib.Name)
		}
	}
	for _, cc := range cfg.ClaimChecks {
		if cc.Stats == nil || cc.Retention < 0 {
			return nil, fmt.Errorf("%w: txboxui: claim check %q has no Stats or a negative Retention", txbox.ErrInvalidConfig, cc.Name)
		}
	}
	def := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&cfg.Interval, DefaultInterval)
	def(&cfg.Timeout, DefaultTimeout)
	if cfg.Samples == 0 {
		cfg.Samples = DefaultSamples
	}
	if cfg.DeadLimit == 0 {
		cfg.DeadLimit = DefaultDeadLimit
	}
	if cfg.ScheduledLimit == 0 {
		cfg.ScheduledLimit = DefaultScheduledLimit
	}
	if cfg.Title == "" {
		cfg.Title = "txbox"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{cfg: cfg, csrf: randomToken(), cop: http.NewCrossOriginProtection(), log: cfg.Logger, history: make([]Sample, cfg.Samples)}
	h.routes()
	return h, nil
}

// ServeHTTP serves the dashboard.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !guard(w, r, h.cfg.Token, h.cfg.AllowedHosts) {
		return
	}
	h.mux.ServeHTTP(w, r)
}

// MinTokenLen is the least length in bytes of a Token for a dashboard
// served on an address that is not loopback (CheckToken).
const MinTokenLen = 16

// CheckToken reports whether token may guard a dashboard served on addr
// (host:port, as given to net.Listen): New's own checks of a Token (not
// white space only, no control character such as a line end read from a
// file), and, when addr's host is not localhost nor a loopback address (an
// empty host is every interface), a Token of at least MinTokenLen bytes.
// Its errors match txbox.ErrInvalidConfig and never hold the token.
func CheckToken(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: txboxui: listen address %q: %v", txbox.ErrInvalidConfig, addr, err)
	}
	if err := checkToken(token); err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	if token == "" {
		return fmt.Errorf("%w: txboxui: %q is not a loopback address: the dashboard would be reachable from the network; set a Token of at least %d bytes", txbox.ErrInvalidConfig, addr, MinTokenLen)
	}
	if len(token) < MinTokenLen {
		return fmt.Errorf("%w: txboxui: the Token is %d bytes: with %q, not a loopback address, it must be at least %d bytes (e.g. openssl rand -hex 16)", txbox.ErrInvalidConfig, len(token), addr, MinTokenLen)
	}
	return nil
}

// checkToken refuses a Token of white space only or with a control
// character; "" (no Token) passes.
func checkToken(token string) error {
	switch {
	case token == "":
		return nil
	case strings.TrimSpace(token) == "":
		return fmt.Errorf("%w: txboxui: the Token is white space only", txbox.ErrInvalidConfig)
	case strings.ContainsFunc(token, unicode.IsControl):
		return fmt.Errorf("%w: txboxui: the Token holds a control character (a line end read from a file?)", txbox.ErrInvalidConfig)
	}
	return nil
}

// checkAccess validates a Token (checkToken) and AllowedHosts.
func checkAccess(token string, allowed []string) error {
	if err := checkToken(token); err != nil {
		return err
	}
	if err := hostcheck.Validate("txboxui: AllowedHosts", allowed); err != nil {
		return fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	return nil
}

// guard is the one access check of Handler and Stores: it sets the
// security headers, refuses a request without token whose Host is not
// loopback nor allowed (DNS rebinding), and one without the token when
// there is one. It reports whether to serve the request.
func guard(w http.ResponseWriter, r *http.Request, token string, allowed []string) bool {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	w.Header().Set("Cache-Control", "no-store")
	if token == "" && !hostcheck.Allowed(r.Host, allowed) {
		hostcheck.Refuse(w, r, "open the dashboard by a loopback address, or allow the name (txboxui.Config.AllowedHosts, txbox ui --allowed-host)")
		return false
	}
	if !authenticated(r, token) {
		w.Header().Set("WWW-Authenticate", `Basic realm="txbox", charset="UTF-8"`)
		http.Error(w, "txbox dashboard: a token is required (basic-auth password or Authorization: Bearer)", http.StatusUnauthorized)
		return false
	}
	return true
}

// Run reads the figures every Interval until ctx ends, so the history
// fills while nobody watches. Without Run, they are read on request, at
// most once per Interval.
func (h *Handler) Run(ctx context.Context) {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		h.state(ctx, true)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample is one point of the history.
type Sample struct {
	At                 time.Time `json:"at"`
	Pending            int64     `json:"pending"`
	Retrying           int64     `json:"retrying"`
	Parked             int64     `json:"parked"`
	Dead               int64     `json:"dead"`
	OldestClaimableSec float64   `json:"oldest_claimable_seconds"`
	// Published is the relays' published counters summed, -1 without
	// relays.
	Published int64 `json:"published"`
}

// Undelivered is every row not yet delivered, dead ones included (as
// inspect.Backlog.Undelivered and txbox stats count it).
func (s Sample) Undelivered() int64 { return s.Pending + s.Retrying + s.Parked + s.Dead }

// State is what the page shows and api/state returns.
type State struct {
	Title        string           `json:"title"`
	At           time.Time        `json:"at"`
	ReadOnly     bool             `json:"read_only"`
	HasBacklog   bool             `json:"has_backlog"`
	Backlog      BacklogJSON      `json:"backlog"`
	BacklogError string           `json:"backlog_error,omitempty"`
	Throughput   Throughput       `json:"throughput"`
	History      []Sample         `json:"history"`
	HasDead      bool             `json:"has_dead"`
	Dead         []DeadJSON       `json:"dead"`
	DeadError    string           `json:"dead_error,omitempty"`
	ParkedKeys   []ParkedKey      `json:"parked_keys"`
	Inboxes      []InboxJSON      `json:"inboxes"`
	ClaimChecks  []ClaimCheckJSON `json:"claim_checks"`
	Relays       []RelayJSON      `json:"relays"`
	Topics       []TopicBacklog   `json:"topics"`

	// HasScheduled: Config.Scheduled is set; Scheduled lists the messages
	// scheduled and not yet due, oldest first, ScheduledMore says that
	// more are than listed.
	HasScheduled   bool            `json:"has_scheduled"`
	Scheduled      []ScheduledJSON `json:"scheduled"`
	ScheduledMore  bool            `json:"scheduled_more"`
	ScheduledError string          `json:"scheduled_error,omitempty"`
}

// BacklogJSON is Backlog with ages in seconds.
type BacklogJSON struct {
	Pending            int64   `json:"pending"`
	Scheduled          int64   `json:"scheduled"` // of pending, not due yet; -1: not counted
	Retrying           int64   `json:"retrying"`
	Parked             int64   `json:"parked"`
	Dead               int64   `json:"dead"`
	ParkedKeys         int64   `json:"parked_keys"` // -1: not counted
	Undelivered        int64   `json:"undelivered"` // pending + retrying + parked + dead, as txbox stats
	OldestClaimableSec float64 `json:"oldest_claimable_seconds"`
	OldestPendingSec   float64 `json:"oldest_pending_seconds"`
	// Upkeep: PostgreSQL only (Backlog.Upkeep), absent elsewhere.
	Upkeep *UpkeepJSON `json:"upkeep,omitempty"`
}

// UpkeepJSON is Upkeep with the age in seconds.
type UpkeepJSON struct {
	OldestTransactionSec float64 `json:"oldest_transaction_seconds"` // 0: none
	DeadRowVersions      int64   `json:"dead_row_versions"`
}

// Throughput is derived from the last two samples: the relays' published
// messages per second (when relays are given) and the change per second of
// the undelivered rows (negative while they drain).
type Throughput struct {
	PublishedPerSec *float64 `json:"published_per_second"`
	BacklogPerSec   *float64 `json:"backlog_change_per_second"`
	WindowSec       float64  `json:"window_seconds"`
}

// DeadJSON is a dead message.
type DeadJSON struct {
	Seq       int64     `json:"seq"`
	ID        string    `json:"id"`
	Topic     string    `json:"topic"`
	Key       string    `json:"key"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error"`
	CreatedAt time.Time `json:"created_at"`
	DeadAt    time.Time `json:"dead_at"`
	Parked    int64     `json:"parked"`
	// Bytes are the full lengths of ID, Topic, Key and LastError: a value
	// longer than ListClip bytes is cut here, and shown whole (up to
	// ValueCap) on the message's own page, dead/SEQ.
	Bytes DeadBytes `json:"bytes"`
}

// DeadBytes are the full lengths in bytes of a dead message's values.
type DeadBytes struct {
	ID        int64 `json:"id"`
	Topic     int64 `json:"topic"`
	Key       int64 `json:"key"`
	LastError int64 `json:"last_error"`
}

// ScheduledJSON is a message scheduled and not yet due.
type ScheduledJSON struct {
	Seq       int64     `json:"seq"`
	ID        string    `json:"id"`
	Topic     string    `json:"topic"`
	Key       string    `json:"key"`
	DueAt     time.Time `json:"due_at"`
	CreatedAt time.Time `json:"created_at"`
	// Parked: a dead message of its key holds it even once due.
	Parked bool `json:"parked,omitempty"`
	// Bytes are the full lengths of ID, Topic and Key, cut here to
	// ListClip bytes (LastError is 0).
	Bytes DeadBytes `json:"bytes"`
}

// ParkedKey is a key a dead message parks: its later messages wait behind
// the dead one DeadSeq (Parked of them now, perhaps none yet) until it is
// redriven or discarded.
type ParkedKey struct {
	Key     string `json:"key"`
	Topic   string `json:"topic"`
	DeadSeq int64  `json:"dead_seq"`
	Parked  int64  `json:"parked"`
	// KeyBytes is the full length of Key, which is cut to ListClip bytes.
	KeyBytes int64 `json:"key_bytes"`
}

// InboxJSON is one inbox table's receipts per source.
type InboxJSON struct {
	Name    string              `json:"name"`
	Sources []inbox.SourceStats `json:"sources"`
	Error   string              `json:"error,omitempty"`
}

// ClaimCheckJSON is one claim check table's figures (claimcheck.Stats),
// ages in seconds.
type ClaimCheckJSON struct {
	Name       string  `json:"name"`
	Payloads   int64   `json:"payloads"`
	Bytes      int64   `json:"bytes"`
	OldestSec  float64 `json:"oldest_seconds"`
	Unreleased int64   `json:"unreleased"`
	// Due and DueBytes are what the next sweep deletes.
	Due          int64   `json:"due"`
	DueBytes     int64   `json:"due_bytes"`
	RetentionSec float64 `json:"retention_seconds"` // 0: not known
	Error        string  `json:"error,omitempty"`
}

// RelayJSON is one relay's state and counters.
type RelayJSON struct {
	Name string `json:"name"`
	// Publisher is RelayRef.Publisher, or "".
	Publisher string `json:"publisher,omitempty"`
	// Remote: read from a relay's readiness endpoint (RelayRef.Readyz);
	// its counters are -1.
	Remote          bool      `json:"remote,omitempty"`
	Running         bool      `json:"running"`
	Ready           bool      `json:"ready"`
	NotReady        string    `json:"not_ready,omitempty"`
	DatabaseOK      bool      `json:"database_ok"`
	BrokerConnected bool      `json:"broker_connected"`
	Listener        string    `json:"listener"`
	LastGoodRound   time.Time `json:"last_good_round"`
	Published       int64     `json:"published"`
	Rejected        int64     `json:"rejected"`
	Dead            int64     `json:"dead"`
	Rounds          int64     `json:"rounds"`
	FailedRounds    int64     `json:"failed_rounds"`
}

// state returns the figures, read anew when the last reading is older
// than Interval or force is set (after an action).
func (h *Handler) state(ctx context.Context, force bool) *State {
	h.refreshMu.Lock()
	defer h.refreshMu.Unlock()
	h.mu.Lock()
	snap := h.snap
	h.mu.Unlock()
	if snap != nil && !force && time.Since(snap.At) < h.cfg.Interval {
		return snap
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	s := h.read(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	s.History = h.appendSample(s)
	s.Throughput = throughput(s.History)
	h.snap = s
	return s
}

func (h *Handler) read(ctx context.Context) *State {
	s := &State{Title: h.cfg.Title, At: time.Now(), ReadOnly: h.cfg.ReadOnly, Dead: []DeadJSON{}, ParkedKeys: []ParkedKey{}, Scheduled: []ScheduledJSON{}, Inboxes: []InboxJSON{}, ClaimChecks: []ClaimCheckJSON{}, Relays: []RelayJSON{}, Topics: []TopicBacklog{}}
	for _, ref := range h.cfg.Relays {
		if ref.Readyz != "" {
			s.Relays = append(s.Relays, remoteRelayStates(ctx, ref)...)
			continue
		}
		s.Relays = append(s.Relays, relayState(ctx, ref))
	}
	backlog := h.cfg.Backlog
	if backlog == nil {
		for _, ref := range h.cfg.Relays {
			if ref.Current == nil {
				continue
			}
			if r := ref.Current(); r != nil {
				backlog = RelayBacklog(r)
				break
			}
		}
	}
	if backlog != nil {
		s.HasBacklog = true
		b, err := backlog(ctx)
		if err != nil {
			s.BacklogError = h.failed("read the backlog", err)
		} else {
			s.Backlog = BacklogJSON{Pending: b.Pending, Scheduled: b.Scheduled, Retrying: b.Retrying, Parked: b.Parked, Dead: b.Dead, ParkedKeys: b.ParkedKeys, Undelivered: b.Pending + b.Retrying + b.Parked + b.Dead,
				OldestClaimableSec: b.OldestClaimableAge.Seconds(), OldestPendingSec: b.OldestPendingAge.Seconds()}
			if u := b.Upkeep; u != nil {
				s.Backlog.Upkeep = &UpkeepJSON{OldestTransactionSec: u.OldestTransactionAge.Seconds(), DeadRowVersions: u.DeadRows}
			}
			if b.Topics != nil {
				s.Topics = b.Topics
			}
		}
	}
	if h.cfg.Dead != nil {
		s.HasDead = true
		// The list reads each value cut (dead.Brief) and shows at most
		// ListClip bytes of it: the page grows with the rows, not with
		// the length of their values.
		list, err := h.cfg.Dead.Brief(ctx, h.cfg.DeadLimit)
		if err != nil {
			s.DeadError = h.failed("list the dead messages", err)
		}
		// A dead row parks its key whether or not a later message of
		// the key waits yet (as the backlog's parked-keys count says): one
		// entry per key, behind its first dead row. A key cut to ListClip
		// bytes is told apart from another by its full length too.
		at := map[string]int{}
		for _, m := range list {
			m.ID, m.Topic, m.Key, m.LastError = clip(m.ID, ListClip), clip(m.Topic, ListClip), clip(m.Key, ListClip), clip(m.LastError, ListClip)
			s.Dead = append(s.Dead, DeadJSON{Seq: m.Seq, ID: m.ID, Topic: m.Topic, Key: m.Key, Attempts: m.Attempts, LastError: m.LastError,
				CreatedAt: m.CreatedAt, DeadAt: m.DeadAt, Parked: m.Parked, Bytes: DeadBytes(m.Bytes)})
			if m.Key == "" {
				continue
			}
			k := m.Key + "\x00" + strconv.FormatInt(m.Bytes.Key, 10)
			if i, ok := at[k]; ok {
				pk := &s.ParkedKeys[i]
				if m.Seq < pk.DeadSeq {
					pk.DeadSeq, pk.Topic = m.Seq, m.Topic
				}
				pk.Parked = max(pk.Parked, m.Parked)
				continue
			}
			at[k] = len(s.ParkedKeys)
			s.ParkedKeys = append(s.ParkedKeys, ParkedKey{Key: m.Key, Topic: m.Topic, DeadSeq: m.Seq, Parked: m.Parked, KeyBytes: m.Bytes.Key})
		}
	}
	if h.cfg.Scheduled != nil {
		s.HasScheduled = true
		rows, more, err := h.cfg.Scheduled(ctx, h.cfg.ScheduledLimit)
		if err != nil {
			s.ScheduledError = h.failed("list the scheduled messages", err)
		}
		s.ScheduledMore = more
		for _, m := range rows {
			s.Scheduled = append(s.Scheduled, ScheduledJSON{Seq: m.Seq, ID: clip(m.ID, ListClip), Topic: clip(m.Topic, ListClip), Key: clip(m.Key, ListClip),
				DueAt: m.NextAttemptAt, CreatedAt: m.CreatedAt, Parked: m.State == inspect.Parked,
				Bytes: DeadBytes{ID: int64(len(m.ID)), Topic: int64(len(m.Topic)), Key: int64(len(m.Key))}})
		}
	}
	for _, ref := range h.cfg.Inboxes {
		ij := InboxJSON{Name: ref.Name, Sources: []inbox.SourceStats{}}
		st, err := ref.Stats(ctx)
		if err != nil {
			ij.Error = h.failed("count the receipts of inbox "+ref.Name, err)
		}
		if st != nil {
			ij.Sources = st
		}
		s.Inboxes = append(s.Inboxes, ij)
	}
	for _, ref := range h.cfg.ClaimChecks {
		cj := ClaimCheckJSON{Name: ref.Name, RetentionSec: ref.Retention.Seconds()}
		st, err := ref.Stats(ctx)
		if err != nil {
			cj.Error = h.failed("read the claim check table "+ref.Name, err)
		} else {
			cj.Payloads, cj.Bytes, cj.OldestSec, cj.Unreleased, cj.Due, cj.DueBytes = st.Payloads, st.Bytes, st.OldestAge.Seconds(), st.Unreleased, st.Due, st.DueBytes
		}
		s.ClaimChecks = append(s.ClaimChecks, cj)
	}
	return s
}

// failed logs err and returns what the page shows: the error's text (a
// database error names no credential; the URL is never given to the
// handler).
func (h *Handler) failed(what string, err error) string {
	h.log.Warn("txboxui: could not "+what, "err", err)
	if errors.Is(err, context.DeadlineExceeded) {
		return "could not " + what + ": timed out"
	}
	return "could not " + what + ": " + err.Error()
}

func relayState(ctx context.Context, ref RelayRef) RelayJSON {
	out := RelayJSON{Name: ref.Name, Publisher: ref.Publisher, Listener: "-"}
	r := ref.Current()
	if r == nil {
		out.NotReady = "no relay is running"
		return out
	}
	st, _ := r.Stats(ctx) // a table that cannot be read is in st.Ready
	out.Running, out.DatabaseOK, out.BrokerConnected, out.LastGoodRound = st.Running, st.DatabaseErr == nil, st.BrokerConnected, st.LastGoodRound
	out.Published, out.Rejected, out.Dead, out.Rounds, out.FailedRounds = st.Published, st.Rejected, st.Dead, st.Rounds, st.FailedRounds
	switch {
	case st.Listening:
		out.Listener = "notify"
	case st.Notify:
		out.Listener = "polling (notify lost)"
	default:
		out.Listener = "polling"
	}
	if err := st.Ready(); err != nil {
		out.NotReady = err.Error()
	} else {
		out.Ready = true
	}
	return out
}

// appendSample adds s to the ring (when its backlog was read) and returns
// the history, oldest first. h.mu is held.
func (h *Handler) appendSample(s *State) []Sample {
	if s.HasBacklog && s.BacklogError == "" {
		p := Sample{At: s.At, Pending: s.Backlog.Pending, Retrying: s.Backlog.Retrying, Parked: s.Backlog.Parked, Dead: s.Backlog.Dead,
			OldestClaimableSec: s.Backlog.OldestClaimableSec, Published: -1}
		if len(s.Relays) > 0 {
			p.Published = 0
			for _, r := range s.Relays {
				if r.Remote {
					p.Published = -1 // a remote relay's counters are not read
					break
				}
				p.Published += r.Published
			}
		}
		h.history[h.next] = p
		h.next = (h.next + 1) % len(h.history)
		h.full = h.full || h.next == 0
	}
	var out []Sample
	if h.full {
		out = append(out, h.history[h.next:]...)
	}
	out = append(out, h.history[:h.next]...)
	if out == nil {
		out = []Sample{}
	}
	return out
}

func throughput(hist []Sample) Throughput {
	var t Throughput
	if len(hist) < 2 {
		return t
	}
	a, b := hist[len(hist)-2], hist[len(hist)-1]
	dt := b.At.Sub(a.At).Seconds()
	if dt <= 0 {
		return t
	}
	t.WindowSec = dt
	d := float64(b.Undelivered()-a.Undelivered()) / dt
	t.BacklogPerSec = &d
	if a.Published >= 0 && b.Published >= a.Published {
		p := float64(b.Published-a.Published) / dt
		t.PublishedPerSec = &p
	}
	return t
}

// clip returns s cut to at most n bytes, at the start of a character.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for j := 0; j < utf8.UTFMax && i > 0 && !utf8.RuneStart(s[i]); j++ {
		i--
	}
	if !utf8.RuneStart(s[i]) { // invalid UTF-8: cut at n
		i = n
	}
	return s[:i]
}
