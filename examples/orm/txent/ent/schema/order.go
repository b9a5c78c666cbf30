// Package schema holds the ent schema of the example: one entity, Order,
// on the orders table.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// Order is a row of the orders table (see internal/shop.OrdersDDL).
type Order struct {
	ent.Schema
}

// Annotations names the table.
func (Order) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "orders"}}
}

// Fields of Order: a caller-chosen string id, the customer and the total.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").MaxLen(64).NotEmpty().Immutable(),
		field.String("customer").MaxLen(64),
		field.Int64("total"),
	}
}
