package relay

import (
	"encoding/json"
	"unicode/utf8"
)

// decodeHeaders decodes a headers column: a JSON object of strings. The
// relay decodes one per message, so the form PostgreSQL prints a jsonb
// object in ({"k": "v", …}: plain strings, no escapes) is read directly,
// its keys and values cut from one string; anything else (escapes,
// non-string values, invalid UTF-8, other JSON) goes to encoding/json, and
// the result is the same either way, errors included.
func decodeHeaders(b []byte) (map[string]string, error) {
	if h, ok := plainHeaders(b); ok {
		return h, nil
	}
	var h map[string]string
	err := json.Unmarshal(b, &h)
	return h, err
}

// plainHeaders reads b when it is an object of plain strings: no
// backslash, no control character, valid UTF-8. ok is false otherwise.
func plainHeaders(b []byte) (_ map[string]string, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	n := 0
	for _, c := range b {
		if c == ':' {
			n++
		}
	}
	s := string(b) // keys and values are cut from this one copy
	h := make(map[string]string, n)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return h, skipSpace(b, i+1) == len(b)
	}
	for {
		var k, v string
		if k, i, ok = plainString(s, i); !ok {
			return nil, false
		}
		if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
			return nil, false
		}
		if v, i, ok = plainString(s, skipSpace(b, i+1)); !ok {
			return nil, false
		}
		h[k] = v
		if i = skipSpace(b, i); i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return h, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// plainString reads the JSON string at s[i:] when it needs no decoding and
// returns it and the index after its closing quote.
func plainString(s string, i int) (_ string, next int, ok bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	ascii := true
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			v := s[i+1 : j]
			if !ascii && !utf8.ValidString(v) {
				return "", 0, false // encoding/json replaces invalid bytes
			}
			return v, j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
