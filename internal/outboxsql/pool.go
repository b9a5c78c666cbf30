package outboxsql

import "github.com/txbox/txbox/driver"

// Pool returns the pool the Store runs its SQL on.
func (s *Store) Pool() driver.Pool { return s.pool }
