package consumer

import (
	"testing"
	"time"
)

func TestBatchingDefaults(t *testing.T) {
	c := &Consumer[int]{cfg: Config{Batch: BatchConfig{Size: 16}}}
	inboxH := &handler[int]{guarantee: Inbox}
	if size, wait := c.batching(inboxH); size != 16 || wait != DefaultBatchWait {
		t.Fatalf("config size, default wait: got %d, %s", size, wait)
	}
	inboxH.Batch = BatchConfig{Size: 1, Wait: time.Second}
	if size, wait := c.batching(inboxH); size != 1 || wait != time.Second {
		t.Fatalf("handler override: got %d, %s", size, wait)
	}
	if size, _ := c.batching(&handler[int]{guarantee: AtLeastOnce}); size != 1 {
		t.Fatalf("at-least-once batched with size %d", size)
	}
	c.cfg.Batch = BatchConfig{}
	if size, _ := c.batching(&handler[int]{guarantee: Inbox}); size != DefaultBatchSize {
		t.Fatalf("default size: got %d", size)
	}
	inb, alo := &handler[int]{guarantee: Inbox}, &handler[int]{guarantee: AtLeastOnce}
	if p := c.prefetch(&binding[int]{routes: []*handler[int]{inb}, concurrency: 8}); p != 8*DefaultBatchSize {
		t.Fatalf("batched prefetch %d, want %d", p, 8*DefaultBatchSize)
	}
	if p := c.prefetch(&binding[int]{routes: []*handler[int]{alo}, concurrency: 8}); p != 16 {
		t.Fatalf("unbatched prefetch %d, want 16", p)
	}
	// A binding with an Inbox route and an at-least-once route batches
	// (the Inbox route's deliveries).
	if size, _ := c.bindingBatching(&binding[int]{routes: []*handler[int]{alo, inb}}); size != DefaultBatchSize {
		t.Fatalf("mixed binding batch size %d, want %d", size, DefaultBatchSize)
	}
}
