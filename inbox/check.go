package inbox

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// checkKey validates a source or message id: not empty, at most max
// characters, valid UTF-8 and free of C0 control characters (U+0000 to
// U+001F) and DEL (U+007F).
//
// NUL matters most: some layers between a program and the database end a
// string at the first NUL (C strings, some drivers, PostgreSQL text cannot
// hold it at all), so "abc\x00x" could be stored, or compared, as "abc" and a
// message with that id would be deduplicated against a different message
// "abc" — an attacker choosing ids could suppress someone else's message.
// Refusing the character keeps every id exactly what it says.
func checkKey(field, s string, max int) error {
	if s == "" {
		return &InputError{Field: field, Reason: ReasonEmpty}
	}
	n := 0
	for i := 0; i < len(s); n++ {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return &InputError{Field: field, Reason: ReasonBadUTF8, Detail: fmt.Sprintf("at byte %d", i)}
		case r < 0x20 || r == 0x7f:
			return &InputError{Field: field, Reason: ReasonControlChar, Detail: fmt.Sprintf("%#02x at byte %d", r, i)}
		}
		i += size
	}
	if n > max {
		return &InputError{Field: field, Reason: ReasonTooLong, Detail: fmt.Sprintf("%d characters, over the limit of %d", n, max)}
	}
	return nil
}

// encodeMetadata encodes metadata as JSON, capped at max bytes. nil is stored
// as SQL NULL.
func encodeMetadata(metadata any, max int) (any, error) {
	if metadata == nil {
		return nil, nil
	}
	b, err := json.Marshal(metadata)
	if err != nil {
		return nil, &InputError{Field: "metadata", Reason: ReasonNotJSON, Err: err}
	}
	if len(b) > max {
		return nil, &InputError{Field: "metadata", Reason: ReasonTooLong, Detail: fmt.Sprintf("%d bytes encoded, over the cap of %d", len(b), max)}
	}
	if hasNULEscape(b) {
		// Valid JSON, but PostgreSQL's jsonb refuses \u0000; refuse it
		// everywhere so that an inbox behaves alike on every database.
		return nil, &InputError{Field: "metadata", Reason: ReasonControlChar, Detail: `a string holds \u0000`}
	}
	return string(b), nil
}

// hasNULEscape reports whether JSON text b escapes a NUL (\u0000) anywhere.
func hasNULEscape(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+6 <= len(b) && string(b[i:i+6]) == `\u0000` {
			return true
		}
		i++ // skip the escaped character, so `\\u0000` is not a NUL
	}
	return false
}
