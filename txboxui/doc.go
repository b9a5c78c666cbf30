// Package txboxui is a web dashboard for a txbox outbox: a mountable
// http.Handler (like riverui's NewServer) showing the backlog by state and
// the oldest claimable age over time, throughput, the dead messages with
// redrive and discard buttons, the keys they park, the scheduled messages
// with their due times and cancel buttons, inbox receipts per source,
// claim check payloads and the relays' state. Its page, script and style sheet are
// embedded (no CDN, works offline); it imports only the standard library
// and txbox's own packages. `txbox ui` serves it from the command line.
//
//	h, err := txboxui.New(txboxui.Config{Dead: letters, Backlog: txboxui.RelayBacklog(r), Relays: []txboxui.RelayRef{{Name: "relay", Current: func() *relay.Relay { return r }}}})
//	mux.Handle("/ui/", http.StripPrefix("/ui", h))
//	go h.Run(ctx) // optional: keep sampling when nobody watches
//
// Several stores (outbox databases) share one dashboard with NewStores: a
// list of the stores with their backlogs, each store's dashboard (made with
// Stores.New) under store/N/, one token, Host and CSRF check for all. A
// relay in another process shows in the relay panel through its readiness
// endpoint (RelayRef.Readyz).
//
// Every link is relative, so the handler works under any prefix stripped
// with http.StripPrefix. The page renders on the server (html/template, so
// every value is escaped) and a small script refreshes it; GET api/state
// is the same figures as JSON.
//
// Safety: without Config.Token, every request whose Host header is not
// loopback nor one of Config.AllowedHosts is refused (421), so that a page
// whose name was rebound to 127.0.0.1 (DNS rebinding) reads and drives
// nothing. Mutating actions (redrive, discard, cancel) are POST only, carry a
// per-process CSRF token in a form field or header that must match a
// SameSite=Strict cookie, and pass net/http's CrossOriginProtection
// (Origin / Sec-Fetch-Site). With Config.Token set, every request must
// carry it (as the basic-auth password, or an "Authorization: Bearer"
// header), whatever its Host; without one, mutating actions are refused to
// clients that are not on loopback. CheckToken says whether a Token may
// guard a given listen address (off loopback: at least MinTokenLen bytes). Values from the database are shown
// escaped (bidi overrides too); the lists show at most ListClip bytes of a
// value, read cut in the database, and a dead message's own page, dead/SEQ,
// each value up to ValueCap. The handler never shows a database URL or
// credential.
package txboxui
