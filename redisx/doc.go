// Package redisx connects txbox to Redis in two ways.
//
// # Redis Streams
//
// StreamPublisher appends each message to the stream Prefix+Topic with XADD,
// pipelined per batch (one round trip per Publish call), optionally trimmed
// with MAXLEN ~ n. An entry's fields are:
//
//	id       the message id (txbox.Message.ID)
//	key      the ordering key ("" when none)
//	payload  the message body
//	h:NAME   one field per header NAME (the "h:" prefix keeps a header from
//	         ever colliding with id, key or payload)
//
// Headers reserved by txbox.IsReservedHeader are dropped, so no header can
// change a message's identity.
//
// Redis Streams has no broker-side dedupe: a message the relay publishes
// twice (a crash after XADD and before the row is marked) is appended twice,
// with the same id field. Duplicates are left to the consumer's inbox, which
// dedupes on the id field. One topic is one stream and a batch is appended
// in order on one connection, so messages of one key keep their order.
//
// StreamSubscriber reads a stream through a consumer group: XREADGROUP for
// new entries, XACK after processing, XAUTOCLAIM to take over entries that
// stayed unacknowledged longer than MinIdle (their consumer died or nacked
// them), with the delivery count from XPENDING, and a dead-letter stream.
//
// # asynq tasks
//
// AsynqPublisher enqueues each message as an asynq task (type = topic,
// payload, headers, TaskID = message id, Retention = OUTBOX_TASK_RETENTION,
// default 24h) with github.com/hibiken/asynq's own client, so an existing
// asynq server processes the events. A re-enqueue of a message whose task
// still exists (pending, running, or retained after completion) fails with
// asynq.ErrTaskIDConflict, which the publisher counts as success: the task
// retention is the dedupe window.
//
// Every constructor takes a go-redis client the caller owns and closes.
package redisx
