package txboxasynq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/redisreply"
	"github.com/txbox/txbox/internal/wire"
)

// Defaults of PublisherConfig.
const (
	// DefaultTaskRetention is how long asynq keeps a completed task, and
	// so how long a re-enqueue of its message is recognised as a duplicate.
	DefaultTaskRetention = 24 * time.Hour
	DefaultQueue         = "default"
	DefaultConcurrency   = 64
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Queue is the asynq queue tasks go to. Default: "default".
	Queue string
	// Retention is asynq's retention of completed tasks: the window in
	// which a re-enqueued message id is a duplicate. Default: 24h.
	// (txbox relay reads TXBOX_TASK_RETENTION.)
	Retention time.Duration
	// Concurrency bounds the enqueues one Publish call has in flight
	// (asynq enqueues one task per round trip). Default: 64.
	Concurrency int
	// Options are added to every task (asynq.MaxRetry, asynq.Timeout, …);
	// the publisher's Queue, TaskID and Retention come after them and win.
	// Default: none (asynq's defaults: 25 retries, 30m timeout).
	Options []asynq.Option
}

// Publisher enqueues messages as asynq tasks; see the package doc.
type Publisher struct {
	client *asynq.Client
	cfg    PublisherConfig
	rdb    *redis.Client // made by FromURL: Close closes it
}

var _ txbox.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher over rdb, a client the caller made
// (it must point at the Redis database the asynq servers use); whoever
// created it closes it.
func NewPublisher(rdb redis.UniversalClient, cfg PublisherConfig) (*Publisher, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: txboxasynq: nil client", txbox.ErrInvalidConfig)
	}
	if cfg.Retention < 0 || cfg.Concurrency < 0 {
		return nil, fmt.Errorf("%w: txboxasynq: negative Retention or Concurrency", txbox.ErrInvalidConfig)
	}
	if cfg.Queue == "" {
		cfg.Queue = DefaultQueue
	}
	if strings.TrimSpace(cfg.Queue) != cfg.Queue {
		return nil, fmt.Errorf("%w: txboxasynq: queue name %q has surrounding spaces", txbox.ErrInvalidConfig, cfg.Queue)
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultTaskRetention
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	return &Publisher{client: asynq.NewClientFromRedisClient(rdb), cfg: cfg}, nil
}

// Task returns the asynq task for m (docs/reference/wire-format.md): type = topic,
// the payload, and as headers the user's (less reserved ones; the
// Content-Type header, in any case, as Content-Type), Txbox-Key and
// Txbox-Created-At.
func (p *Publisher) Task(m txbox.Message) *asynq.Task {
	h := make(map[string]string, len(m.Headers)+2)
	for k, v := range m.Headers {
		switch {
		case txbox.IsReservedHeader(k): // rows written by plain SQL are not validated by Add
		case wire.IsContentType(k):
			h[wire.ContentTypeHeader] = v
		default:
			h[k] = v
		}
	}
	if m.Key != "" {
		h[txbox.HeaderKey] = m.Key
	}
	if !m.CreatedAt.IsZero() {
		h[txbox.HeaderCreatedAt] = wire.Time(m.CreatedAt)
	}
	if len(h) == 0 {
		h = nil
	}
	return asynq.NewTaskWithHeaders(m.Topic, m.Payload, h, p.cfg.Options...)
}

// Publish enqueues msgs, up to Concurrency at a time, and returns
// per-message errors; see txbox.Publisher. A task id that already exists
// (the message was enqueued before and its task is pending, running or
// retained) counts as success.
//
// asynq servers run tasks concurrently, so an asynq target keeps no per-key
// order of processing even though a batch is enqueued in order per key.
func (p *Publisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
	// Lanes: the messages of one key, chained in batch order (next), are
	// enqueued one after another by one worker; every message without a
	// key is a lane of its own. Workers take lanes in order of their heads.
	next := make([]int, len(msgs))
	var heads []int
	last := map[string]int{} // key → its latest message so far
	for i, m := range msgs {
		next[i] = -1
		if m.Key != "" {
			if j, ok := last[m.Key]; ok {
				next[j], last[m.Key] = i, i
				continue
			}
			last[m.Key] = i
		}
		heads = append(heads, i)
	}
	errs := make([]error, len(msgs))
	var failed atomic.Bool
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range min(p.cfg.Concurrency, len(heads)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := taken.Add(1) - 1; h < int64(len(heads)); h = taken.Add(1) - 1 {
				for i := heads[h]; i >= 0; i = next[i] {
					if err := p.enqueue(ctx, msgs[i]); err != nil {
						errs[i] = err // each index is written by one worker only
						failed.Store(true)
					}
				}
			}
		}()
	}
	wg.Wait()
	if !failed.Load() {
		return nil
	}
	return errs
}

func (p *Publisher) enqueue(ctx context.Context, m txbox.Message) error {
	if m.ID == "" {
		return txbox.Reject(errors.New("txboxasynq: asynq task needs a message id"))
	}
	_, err := p.client.EnqueueContext(ctx, p.Task(m), asynq.Queue(p.cfg.Queue), asynq.TaskID(m.ID), asynq.Retention(p.cfg.Retention))
	switch {
	case err == nil, errors.Is(err, asynq.ErrTaskIDConflict), errors.Is(err, asynq.ErrDuplicateTask):
		return nil
	case strings.Contains(err.Error(), "typename cannot be empty"), redisreply.MessageFault(err):
		return txbox.Reject(fmt.Errorf("txboxasynq: enqueue task %s: %w", m.ID, err))
	}
	return fmt.Errorf("txboxasynq: enqueue task %s: %w", m.ID, err)
}

// Queue returns the asynq queue tasks go to.
func (p *Publisher) Queue() string { return p.cfg.Queue }
