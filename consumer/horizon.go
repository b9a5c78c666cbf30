package consumer

import (
	"context"
	"fmt"
	"sort"

	"github.com/txbox/txbox"
)

// checkHorizons compares the inbox retention with the horizon of every
// binding that has an Inbox handler, where the Subscriber can read it
// (txbox.HorizonReporter): a retention that does not exceed it is a
// problem, since a message could reach the handler again after its receipt
// was swept and run twice. An unknown or unbounded horizon is logged, once
// per binding and Consumer.
func (c *Consumer[TTx]) checkHorizons(ctx context.Context, hs []*handler[TTx]) []string {
	need := map[string]bool{}
	for _, h := range hs {
		if h.guarantee == Inbox && h.Binding != "" {
			need[h.Binding] = true
		}
	}
	bs := make([]string, 0, len(need))
	for b := range need {
		bs = append(bs, b)
	}
	sort.Strings(bs)
	retention := c.ib.Retention()
	hr, _ := c.cfg.Broker.(txbox.HorizonReporter)
	var problems []string
	for _, b := range bs {
		var hz txbox.Horizon
		var err error
		if hr == nil {
			hz.Detail = fmt.Sprintf("the Subscriber (%T) cannot report it", c.cfg.Broker)
		} else if hz, err = hr.Horizon(ctx, b); err != nil {
			hz = txbox.Horizon{Detail: err.Error()}
		}
		if hz.Age > 0 {
			if retention <= hz.Age {
				problems = append(problems, fmt.Sprintf("binding %q: the inbox retention (%v) does not exceed the broker's redelivery horizon (%v: %s): a message could run again after its receipt is swept; raise inbox.Config.Retention or lower the broker's",
					b, retention, hz.Age, hz.Detail))
			}
			continue
		}
		if _, seen := c.routing.logged.LoadOrStore("horizon:"+b, true); !seen {
			c.log.Info("txbox/consumer: the broker's redelivery horizon is unknown or unbounded; the inbox retention cannot be checked against it",
				"binding", b, "retention", retention, "detail", hz.Detail)
		}
	}
	return problems
}
