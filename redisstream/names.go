package redisstream

import "github.com/txbox/txbox/internal/dotname"

// CheckPrefix checks a Prefix: dot-separated tokens, none empty, of
// printable characters other than spaces, with no '*' or '>'. NewPublisher
// refuses a Prefix CheckPrefix refuses. The error reads after the name of
// the setting: `"a..b": empty token (a leading, trailing or doubled '.')`.
func CheckPrefix(prefix string) error { return dotname.Prefix(prefix) }
