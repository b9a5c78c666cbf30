package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// Handle checks the message's source, id and metadata before it begins a
// transaction: a message it can never record (here, one with no id) is an
// *InputError, the same on every attempt, so a consumer dead-letters it
// instead of retrying. (The *sql.DB is nil here because neither New nor a
// refused Handle uses it.)
func ExampleInputError() {
	ib, err := inbox.New(txboxsql.New(nil, txboxdriver.SQLite), inbox.Config{Table: "txbox_inbox"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = ib.Handle(context.Background(), "billing", "", nil, func(ctx context.Context, tx *sql.Tx) error {
		return nil // not called
	})
	var in *inbox.InputError
	fmt.Println(errors.As(err, &in), in.Field, in.Reason)
	fmt.Println(err)
	// Output:
	// true message id is empty
	// txbox/inbox: message id is empty
}
