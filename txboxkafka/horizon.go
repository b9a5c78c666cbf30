package txboxkafka

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txbox/txbox"
)

var _ txbox.HorizonReporter = (*Subscriber)(nil)

// Horizon reports the topic's retention.ms: a record can be read again (a
// rebalance, an offset reset) as long as the topic keeps it. retention.ms
// -1 (keep for ever) is an unbounded horizon (Age 0). Kafka has no
// per-record ack deadline: a Delivery is not a txbox.DeadlineExtender; a
// long handler instead holds back its partition's offset commit.
func (s *Subscriber) Horizon(ctx context.Context, binding string) (txbox.Horizon, error) {
	topic, _, err := ParseBinding(binding)
	if err != nil {
		return txbox.Horizon{}, err
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = topic
	res.ConfigNames = []string{"retention.ms"}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return txbox.Horizon{}, fmt.Errorf("txboxkafka: describe configs of %s: %w", topic, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return txbox.Horizon{}, fmt.Errorf("txboxkafka: describe configs of %s: %w", topic, err)
		}
		for _, c := range r.Configs {
			if c.Name != "retention.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return txbox.Horizon{}, fmt.Errorf("txboxkafka: topic %s: retention.ms %q: %w", topic, *c.Value, err)
			}
			if ms < 0 {
				return txbox.Horizon{Detail: fmt.Sprintf("topic %s keeps records for ever (retention.ms %d)", topic, ms)}, nil
			}
			d := time.Duration(ms) * time.Millisecond
			return txbox.Horizon{Age: d, Detail: fmt.Sprintf("topic %s: retention.ms %d (%v)", topic, ms, d)}, nil
		}
	}
	return txbox.Horizon{Detail: fmt.Sprintf("topic %s: the broker did not report retention.ms", topic)}, nil
}
