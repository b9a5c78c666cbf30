package inboxsql

import (
	"context"

	"github.com/txbox/txbox/txboxdriver"
)

// Savepoints are the statements with which a batch of messages shares one
// transaction: each message's receipt and handler run after Savepoint; a
// failure rolls back to it; a success leaves it (the next Savepoint reuses
// the name, COMMIT releases them all). The SQL is the same on PostgreSQL,
// SQLite and MySQL, but lives in each dialect's file with the rest of the
// inbox's.
type Savepoints interface {
	Savepoint(ctx context.Context, ex txboxdriver.Executor) error
	RollbackSavepoint(ctx context.Context, ex txboxdriver.Executor) error
}

type savepoints struct{ set, rollback string }

func (s *savepoints) dests() map[string]*string {
	return map[string]*string{"savepoint": &s.set, "rollback_savepoint": &s.rollback}
}

func (s *savepoints) Savepoint(ctx context.Context, ex txboxdriver.Executor) error {
	_, err := ex.Exec(ctx, s.set)
	return err
}

func (s *savepoints) RollbackSavepoint(ctx context.Context, ex txboxdriver.Executor) error {
	_, err := ex.Exec(ctx, s.rollback)
	return err
}
