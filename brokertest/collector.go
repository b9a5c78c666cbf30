package brokertest

import (
	"context"
	"sync"
)

// Collector is a Reader for brokers that push deliveries to a callback (a
// subscription, a task handler): the callback calls Add, and Read waits for
// it.
type Collector struct {
	mu     sync.Mutex
	topics map[string][]Delivery
	wake   chan struct{}
}

var _ Reader = (*Collector)(nil)

// NewCollector returns an empty Collector.
func NewCollector() *Collector {
	return &Collector{topics: map[string][]Delivery{}, wake: make(chan struct{})}
}

// Add records a delivery of topic.
func (c *Collector) Add(topic string, d Delivery) {
	c.mu.Lock()
	c.topics[topic] = append(c.topics[topic], d)
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
}

// Read waits until n deliveries of topic were added; see Reader.
func (c *Collector) Read(ctx context.Context, topic string, n int) ([]Delivery, error) {
	for {
		c.mu.Lock()
		ds, wake := c.topics[topic], c.wake
		if len(ds) >= n {
			out := append([]Delivery(nil), ds...)
			c.mu.Unlock()
			return out, nil
		}
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return append([]Delivery(nil), ds...), ctx.Err()
		}
	}
}
