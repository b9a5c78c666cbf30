package txboxpgx_test

import (
	"fmt"

	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
)

// Beyond the four methods of txboxdriver.Driver, the pgx driver has the optional
// capabilities txbox looks for by type assertion: on the driver, LISTEN/NOTIFY
// on one connection per database (ChannelListener) and pgx's own error
// classes (ErrorClassifier); on its pool, transactions at a chosen isolation
// level (TxBeginner) and a claim sent as one pgx batch with its BEGIN
// (QueryBeginner). New opens nothing: the pool (nil here) is only used once
// the driver runs.
func ExampleDriver_capabilities() {
	drv := txboxpgx.New(nil)
	var d, p any = drv, drv.Pool()
	_, listens := d.(txboxdriver.ChannelListener)
	_, classifies := d.(txboxdriver.ErrorClassifier)
	_, begins := p.(txboxdriver.TxBeginner)
	_, batches := p.(txboxdriver.QueryBeginner)
	fmt.Println(drv.Dialect(), listens, classifies, begins, batches)
	// Output: postgres true true true true
}
