// Package drivertest is the conformance suite of txbox's database drivers:
// every driver that txbox ships runs it in CI, and a third-party driver —
// an implementation of txboxdriver.Driver for another database library — runs
// it too, from its own tests:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Exercise(t, func(t *testing.T) txboxdriver.Driver[*sql.Tx] {
//			return mydriver.New(openFreshDatabase(t)) // empty, isolated, closed by t.Cleanup
//		})
//	}
//
// It drives the driver only through txbox's public packages — migrate,
// txbox (Outbox.Add), relay, dead and inbox — with a recording publisher in
// place of a broker, so a pass means that those packages work on the
// driver: migrations apply and re-apply as a no-op; added messages are
// claimed, published, marked, retried, parked as dead, redriven, discarded
// and cleaned up; per-key order holds; N relays on one table publish each
// message once; the inbox's insert-first receipt runs a handler once for
// many concurrent copies of a message; where the driver sends statements
// at once (txboxdriver.QueryBeginner, txboxdriver.ExecCommitter,
// txboxdriver.ChainBeginner), they do what they would one by one.
//
// newDriver is called once per subtest, and subtests run in parallel: each
// call must return a driver on a fresh, empty database (or schema) of its
// own, with room for at least 8 concurrent connections, released by
// t.Cleanup. The suite needs no service but the database.
package drivertest
