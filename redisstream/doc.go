// Package redisstream connects txbox to Redis Streams: a Publisher for the
// relay and a Subscriber for package consumer.
//
// The Publisher appends each message to the stream Prefix+Topic with XADD,
// pipelined per batch (one round trip per Publish call), optionally trimmed
// with MAXLEN ~ n. An entry's fields are:
//
//	id       the message id (txbox.Message.ID)
//	key      the ordering key ("" when none)
//	payload  the message body
//	created_at  the row's created_at, RFC 3339 UTC with nine fractional
//	         digits (absent when unknown)
//	h:NAME   one field per header NAME (the "h:" prefix keeps a header from
//	         ever colliding with id, key or payload); the Content-Type
//	         header, in any case, is h:Content-Type
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
// The Subscriber reads a stream through a consumer group (a binding is
// Binding(stream, group)): XREADGROUP for new entries, XACK after
// processing, XAUTOCLAIM to take over entries that stayed unacknowledged
// longer than AckWait (their consumer died or gave them back), with the
// delivery count from XPENDING, and a dead-letter stream
// STREAM+DeadLetterSuffix.
//
// NewPublisher and NewSubscriber take a go-redis client the caller made;
// whoever created it closes it.
package redisstream
