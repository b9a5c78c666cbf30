// Package txboxasynq connects txbox to asynq (github.com/hibiken/asynq):
// a Publisher for the relay that enqueues each message as an asynq task,
// so an existing asynq server processes the events. (The name is prefixed
// so that it does not collide with package asynq, which programs using it
// import too.)
//
// A task has type = topic, the payload, the headers, TaskID = message id
// and Retention = PublisherConfig.Retention (TXBOX_TASK_RETENTION, default
// 24h), and is enqueued with asynq's own client. A re-enqueue of a message
// whose task still exists (pending, running, or retained after completion)
// fails with asynq.ErrTaskIDConflict, which the publisher counts as
// success: the task retention is the dedupe window.
//
// There is no Subscriber: asynq servers consume the tasks.
//
// NewPublisher takes a go-redis client the caller made; whoever created it
// closes it.
package txboxasynq
