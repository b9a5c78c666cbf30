// Package brokerurl holds what the broker adapters' ParseURL functions
// share: url.Parse with errors that never quote a password, the masking of
// passwords in what an error quotes, and the splitting of server lists.
package brokerurl

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces a password in what an error quotes (as url.URL.Redacted).
const Mask = "xxxxx"

// Parse parses raw with url.Parse. Its error does not quote raw, and says
// what is wrong without quoting a piece of the password: url.Parse reads the text of a password before a '/', '?' or
// '#' in it as a port, and quotes a bad %-escape with the bytes after it.
func Parse(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err == nil {
		return u, nil
	}
	return nil, fmt.Errorf("malformed URL: %s", Why(raw, err))
}

// Why returns what url.Parse's error err (its inner error, without the
// quoted URL) says about raw, unless that could quote a piece of a
// password: url.Parse reads the text of a password before a '/', '?' or
// '#' in it as a port ("invalid port \":pa\" after host") and quotes a bad
// %-escape with the bytes after it; for those it says how to write the
// password instead. raw may be a list of URLs, and its passwords include
// password=… parameters (see Passwords).
func Why(raw string, err error) string {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		msg = ue.Err.Error()
	}
	var esc url.EscapeError
	if errors.As(err, &esc) {
		for _, pw := range Passwords(raw) {
			if BadEscape(pw) { // a password=…%zz… parameter, not only a userinfo
				return "invalid %-escape in the user name or password (a '%' in it must be written %25)"
			}
		}
	}
	for _, seg := range Authorities(raw) {
		at := strings.LastIndex(seg, "@")
		switch {
		case at < 0:
		case strings.ContainsAny(seg[:at], "/?#"):
			return "a '/', '?' or '#' in the user name or password must be percent-encoded (%2F, %3F, %23)"
		case BadEscape(seg[:at]):
			return "invalid %-escape in the user name or password (a '%' in it must be written %25)"
		}
	}
	for _, pw := range Passwords(raw) {
		if pw != "" && strings.Contains(msg, pw) {
			return "the URL does not parse"
		}
	}
	return msg
}

// KVPassword matches password=VALUE, in key/value DSNs ('quoted' values
// too) and URL queries: group 1 is the key and '=', group 2 the value.
var KVPassword = regexp.MustCompile("(?i)\\b((?:password|passwd|pwd|sslpassword)\\s*=\\s*)('(?:[^'\\\\]|\\\\.)*'|[^\\s&;\"'`]*)")

// Passwords returns the passwords of v as written, leniently: that of
// each URL's userinfo (v may be a list of URLs) and each password=…
// parameter's.
func Passwords(v string) []string {
	var out []string
	for _, seg := range Authorities(v) {
		if at := strings.LastIndex(seg, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(seg[:at], ":"); ok {
				out = append(out, pw)
			}
		}
	}
	for _, m := range KVPassword.FindAllStringSubmatch(v, -1) {
		out = append(out, strings.Trim(m[2], "'"))
	}
	return out
}

// Authorities splits v at each scheme:// into the text after it, up to the
// next URL of a list; a v without :// is one segment.
func Authorities(v string) []string {
	parts := strings.Split(v, "://")
	if len(parts) == 1 {
		return parts
	}
	segs := parts[1:]
	for i := range segs[:len(segs)-1] {
		// Drop the next URL's scheme from the end of this segment.
		s := segs[i]
		if j := strings.LastIndexAny(s, ", "); j >= 0 {
			segs[i] = s[:j]
		}
	}
	return segs
}

// userinfoOf returns the text of raw between its "://" and the last '@',
// leniently (as url.Parse reads a userinfo holding a '/', it does not).
func userinfoOf(raw string) (string, bool) {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		rest = raw
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return "", false
	}
	return rest[:at], true
}

// password returns the password of raw's userinfo as written, leniently;
// "" if it has none.
func password(raw string) string {
	userinfo, ok := userinfoOf(raw)
	if !ok {
		return ""
	}
	_, pw, _ := strings.Cut(userinfo, ":")
	return pw
}

// Redact returns raw with the password of its userinfo masked: the text
// between the first ':' after "://" and the last '@', so that a password
// url.Parse refuses is masked too.
func Redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	user, _, hasPW := strings.Cut(rest[:at], ":")
	if !hasPW {
		return raw
	}
	out := user + ":" + Mask + rest[at:]
	if ok {
		out = scheme + "://" + out
	}
	return out
}

// Split splits a comma-separated list, trimming spaces and dropping empty
// items.
func Split(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// ListSplitsPassword reports whether a password in raw, a comma-separated
// list of URLs, holds a ',' where the list would be split.
func ListSplitsPassword(raw string) bool {
	parts := strings.Split(raw, "://")
	for i, seg := range parts[1:] {
		if i < len(parts)-2 { // drop the next URL's scheme from the segment
			if j := strings.LastIndexAny(seg, ", "); j >= 0 {
				seg = seg[:j]
			}
		}
		if at := strings.LastIndex(seg, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(seg[:at], ":"); ok && strings.Contains(pw, ",") {
				return true
			}
		}
	}
	return false
}

// BadEscape reports whether s holds a '%' not followed by two hex digits.
func BadEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && (i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2])) {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Scrub returns msg, an SDK's error message about raw, with raw's password
// masked wherever it occurs, as written and percent-decoded.
func Scrub(msg, raw string) string {
	pw := password(raw)
	if pw == "" {
		return msg
	}
	secrets := []string{pw}
	if d, err := url.PathUnescape(pw); err == nil && d != pw {
		secrets = append(secrets, d)
	}
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, Mask)
	}
	return msg
}

// Error returns err with raw's password masked in its message (see Scrub);
// errors.Is and errors.As see err through it. Nil for a nil err.
func Error(err error, raw string) error {
	if err == nil {
		return nil
	}
	return &scrubbed{msg: Scrub(err.Error(), raw), err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
