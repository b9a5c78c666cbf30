// Command producer is the crash harness's writer: in a loop, one
// transaction per message, it inserts a business row (crash_orders: key,
// the key's next version, message id) and adds the message to the outbox
// with txbox.Outbox.Add. The database is its only record of what it
// committed: a transaction cut short by a kill leaves neither.
//
//	producer -db URL -keys 16 -interval 5ms [-message-prefix P]
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/crash/internal/crashdb"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

func main() {
	dbURL := flag.String("db", "", "database URL (postgres://… or sqlite:PATH)")
	keys := flag.Int("keys", 16, "ordering keys k00…")
	topic := flag.String("topic", "orders", "topic of the messages")
	interval := flag.Duration("interval", 5*time.Millisecond, "pause between transactions")
	prefix := flag.String("message-prefix", "", "message mode: Add writes to PostgreSQL's WAL with this prefix (txbox.Config.MessagePrefix)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix(fmt.Sprintf("producer[%d] ", os.Getpid()))

	db, dialect, err := crashdb.Open(*dbURL)
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	ob, err := txbox.New(txboxsql.New(db, dialect), txbox.Config{MessagePrefix: *prefix})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	committed, failed := 0, 0
	last := time.Now()
	for {
		key := fmt.Sprintf("k%02d", rand.IntN(*keys))
		if err := produce(ctx, db, dialect, ob, *topic, key); err != nil {
			failed++
			if failed%50 == 1 {
				log.Printf("transaction failed (%d so far): %v", failed, err)
			}
			time.Sleep(50 * time.Millisecond)
		} else {
			committed++
		}
		if time.Since(last) > 5*time.Second {
			log.Printf("committed %d, failed %d", committed, failed)
			last = time.Now()
		}
		time.Sleep(*interval)
	}
}

// produce commits key's next version: the business row and its message in
// one transaction.
func produce(ctx context.Context, db *sql.DB, d txboxdriver.Dialect, ob *txbox.Outbox[*sql.Tx], topic, key string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var version int
	if err := tx.QueryRowContext(ctx, crashdb.Q(d, "SELECT coalesce(max(version), 0) + 1 FROM crash_orders WHERE key = ?"), key).Scan(&version); err != nil {
		return fmt.Errorf("next version: %w", err)
	}
	id := crashdb.MsgID(key, version)
	if _, err := ob.Add(ctx, tx, txbox.Message{ID: id, Topic: topic, Key: key, Payload: []byte(id)}); err != nil {
		return fmt.Errorf("add %s: %w", id, err)
	}
	// Last before the commit: its time is the message's commit time, for
	// the ledger's commit→effect latency.
	if _, err := tx.ExecContext(ctx, crashdb.Q(d, "INSERT INTO crash_orders (key, version, msg_id, committed_us) VALUES (?, ?, ?, ?)"), key, version, id, time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("insert %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return errors.Join(fmt.Errorf("commit %s", id), err)
	}
	return nil
}
