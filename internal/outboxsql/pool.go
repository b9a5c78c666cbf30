package outboxsql

import "github.com/txbox/txbox/txboxdriver"

// Pool returns the pool the Store runs its SQL on.
func (s *Store) Pool() txboxdriver.Pool { return s.pool }
