package consumer

import (
	"slices"
	"testing"
	"time"
)

// collect fills a batch up to its size from what is ready, stops short when
// nothing more comes within the wait or the channel closes, and keeps the
// arrival order.
func TestCollect(t *testing.T) {
	in := make(chan int, 10)
	for i := 2; i <= 9; i++ {
		in <- i
	}
	if got := collect(1, in, 4, time.Hour); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("full batch: got %v, want [1 2 3 4]", got)
	}
	// 5 left, size 10: the wait ends the batch (the channel stays open).
	if got := collect(50, in, 10, time.Millisecond); !slices.Equal(got, []int{50, 5, 6, 7, 8, 9}) {
		t.Fatalf("batch ended by the wait: got %v, want [50 5 6 7 8 9]", got)
	}
	close(in)
	if got := collect(10, in, 10, time.Hour); !slices.Equal(got, []int{10}) {
		t.Fatalf("closed channel: got %v, want [10]", got)
	}
	if got := collect(11, in, 1, time.Hour); !slices.Equal(got, []int{11}) {
		t.Fatalf("size 1: got %v, want [11]", got)
	}
}

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
