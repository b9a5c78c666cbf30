package txboxpgx_test

import (
	"fmt"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/txboxpgx"
)

// Beyond the four methods of driver.Driver, the pgx driver has the optional
// capabilities txbox looks for by type assertion: on the driver, LISTEN/NOTIFY
// on one connection per database (ChannelListener) and pgx's own error
// classes (ErrorClassifier); on its pool, transactions at a chosen isolation
// level (TxBeginner) and a claim sent as one pgx batch with its BEGIN
// (QueryBeginner). New opens nothing: the pool (nil here) is only used once
// the driver runs.
func ExampleDriver_capabilities() {
	drv := txboxpgx.New(nil)
	var d, p any = drv, drv.Pool()
	_, listens := d.(driver.ChannelListener)
	_, classifies := d.(driver.ErrorClassifier)
	_, begins := p.(driver.TxBeginner)
	_, batches := p.(driver.QueryBeginner)
	fmt.Println(drv.Dialect(), listens, classifies, begins, batches)
	// Output: postgres true true true true
}
