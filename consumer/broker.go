package consumer

import "github.com/txbox/txbox"

// Message is one delivery as a handler sees it: txbox.Received, named here
// so that handler signatures read consumer.Message.
type Message = txbox.Received
