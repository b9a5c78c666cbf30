// Package outboxtable resolves the outbox table a relay, dead, inspect or
// txboxmigrate works on, from its config and the driver it was given.
package outboxtable

import "fmt"

// Of returns the outbox table that cfgSchema and cfgTable name, or the
// one drv knows (drv is a txbox.Outbox) when they are empty; both set and
// different is an error (which callers wrap in txbox.ErrInvalidConfig).
func Of(drv any, cfgSchema, cfgTable string) (schema, table string, err error) {
	t, ok := drv.(interface {
		OutboxTable() (schema, table string)
	})
	if !ok {
		return cfgSchema, cfgTable, nil
	}
	schema, table = t.OutboxTable()
	if (cfgSchema != "" && cfgSchema != schema) || (cfgTable != "" && cfgTable != table) {
		return "", "", fmt.Errorf("the outbox is %s, the config names %s", dotted(schema, table), dotted(cfgSchema, cfgTable))
	}
	return schema, table, nil
}

func dotted(schema, table string) string {
	if schema == "" {
		return table
	}
	return schema + "." + table
}
