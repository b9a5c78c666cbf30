package consumer

import (
	"context"
	"encoding/json"
	"fmt"
)

// HandleInboxJSON registers fn as the Inbox handler of h (see
// Consumer.HandleInbox), with the payload decoded from JSON into a T. A
// payload that does not decode is dead-lettered at once (Permanent), with
// the decoding error; the receipt is rolled back with it, so a fixed copy
// of the message may still run.
func HandleInboxJSON[T, TTx any](c *Consumer[TTx], h HandlerConfig, fn func(ctx context.Context, tx TTx, msg Message, v T) error) error {
	return c.HandleInbox(h, func(ctx context.Context, tx TTx, msg Message) error {
		v, err := decodeJSON[T](msg)
		if err != nil {
			return err
		}
		return fn(ctx, tx, msg, v)
	})
}

// HandleAtLeastOnceJSON is HandleInboxJSON's twin for an AtLeastOnce
// handler (see Consumer.HandleAtLeastOnce).
func HandleAtLeastOnceJSON[T, TTx any](c *Consumer[TTx], h HandlerConfig, fn func(ctx context.Context, msg Message, v T) error) error {
	return c.HandleAtLeastOnce(h, func(ctx context.Context, msg Message) error {
		v, err := decodeJSON[T](msg)
		if err != nil {
			return err
		}
		return fn(ctx, msg, v)
	})
}

func decodeJSON[T any](msg Message) (T, error) {
	var v T
	if err := json.Unmarshal(msg.Payload, &v); err != nil {
		return v, Permanent(fmt.Errorf("decode the payload of message %q as JSON into %T: %w", msg.ID, v, err))
	}
	return v, nil
}
