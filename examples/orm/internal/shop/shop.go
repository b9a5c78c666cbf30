// Package shop is the one-table domain every ORM example shares: the orders
// table, the order.placed event that placing an order adds to the outbox,
// and the checkout.completed message an inbox handler turns into an order.
package shop

import (
	"encoding/json"
	"fmt"

	"github.com/txbox/txbox"
)

// OrdersDDL creates the orders table. The statement is the same on
// PostgreSQL, SQLite and MySQL/MariaDB; sqlc reads it from txsqlc/schema.sql,
// which must stay equal to it.
const OrdersDDL = `CREATE TABLE orders (
	id varchar(64) PRIMARY KEY,
	customer varchar(64) NOT NULL,
	total bigint NOT NULL
)`

// TopicOrderPlaced is the topic of the event added with every order.
const TopicOrderPlaced = "order.placed"

// TopicCheckoutCompleted is the topic of the messages the inbox handlers
// of the examples receive.
const TopicCheckoutCompleted = "checkout.completed"

// Checkout is the payload of a checkout.completed message, and what an
// order is made of.
type Checkout struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Total    int64  `json:"total"`
}

// OrderPlaced is the event of an order: keyed by its customer, so that one
// customer's events are delivered in order.
func OrderPlaced(orderID, customer string) txbox.Message {
	return txbox.Message{
		Topic:   TopicOrderPlaced,
		Key:     customer,
		Payload: fmt.Appendf(nil, `{"order_id":%q}`, orderID),
	}
}

// CheckoutMessage is a checkout.completed message with id msgID, as another
// service would publish it.
func CheckoutMessage(msgID string, c Checkout) txbox.Message {
	body, _ := json.Marshal(c)
	return txbox.Message{ID: msgID, Topic: TopicCheckoutCompleted, Key: c.Customer, Payload: body}
}

// DecodeCheckout decodes a checkout.completed payload.
func DecodeCheckout(payload []byte) (Checkout, error) {
	var c Checkout
	if err := json.Unmarshal(payload, &c); err != nil {
		return Checkout{}, fmt.Errorf("decode checkout: %w", err)
	}
	if c.OrderID == "" || c.Customer == "" {
		return Checkout{}, fmt.Errorf("decode checkout: order_id and customer are required")
	}
	return c, nil
}
