package ent

// The ent command is a tool of this module (go.mod's tool directive).
//go:generate go tool ent generate ./schema
