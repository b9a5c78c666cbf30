package relay_test

import (
	"errors"
	"fmt"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// New checks the configuration and touches no database: a setting out of
// range is an error wrapping txbox.ErrInvalidConfig, at start-up rather than
// at the first claim. (The *sql.DB is nil here because New never uses it;
// Start does.) The zero Config is valid: every field has a default.
func ExampleNew_config() {
	drv := txboxsql.New(nil, txboxdriver.SQLite)
	broker := txboxtest.NewBroker(txboxtest.BrokerConfig{})

	_, err := relay.New(drv, broker, relay.Config{BatchSize: 20000})
	fmt.Println(errors.Is(err, txbox.ErrInvalidConfig))
	fmt.Println(err)

	r, err := relay.New(drv, broker, relay.Config{})
	fmt.Println(r != nil, err)
	// Output:
	// true
	// txbox: invalid config: batch size 20000 is over 10000
	// true <nil>
}
