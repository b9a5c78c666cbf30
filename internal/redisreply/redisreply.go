// Package redisreply sorts Redis error replies into the message's fault
// (which the adapters redisstream and txboxasynq report with txbox.Reject)
// and the server's state (transient). It imports no Redis client: a reply
// is recognised by go-redis's RedisError marker method.
package redisreply

import (
	"errors"
	"strings"
)

// reply is go-redis's redis.Error: an error reply from the server.
type reply interface {
	error
	RedisError()
}

// transientPrefixes are Redis error replies that concern the server's state,
// not the message: they cost no attempt.
var transientPrefixes = []string{
	"OOM", "LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN",
	"CLUSTERDOWN", "MOVED", "ASK", "NOREPLICAS", "MISCONF", "EXECABORT",
}

// MessageFault reports whether err holds a Redis error reply about the
// message (WRONGTYPE: the key's name holds another type; NOPERM: ACLs
// forbid the key; a malformed command). Network errors, timeouts and
// replies about the server's state (OOM, LOADING, READONLY, failover …)
// are not: they are transient.
func MessageFault(err error) bool {
	var re reply
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range transientPrefixes {
		if strings.HasPrefix(msg, p) {
			return false
		}
	}
	return !strings.HasPrefix(msg, "ERR max number of clients") && !strings.HasPrefix(msg, "ERR Protocol error")
}
