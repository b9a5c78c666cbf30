package cli

import (
	"bytes"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// redactVocabulary is the fixed text that redaction and parseURL's errors
// print around a URL (theirs and net/url's): a password that is part of it
// (such as "URL" or "port") shows in the output without leaking.
var redactVocabulary = strings.Join([]string{
	secretMask, "--db --broker", "malformed URL", "invalid port", "after host",
	"invalid character", "in host name", "missing protocol scheme",
	"first path segment in URL cannot contain colon", "invalid URL escape",
	"net/url: invalid control character in URL", "invalid userinfo",
	"invalid IP-literal", "unexpected", "empty url",
	"a '/', '?' or '#' in the user name or password must be percent-encoded (%2F, %3F, %23)",
	"invalid %-escape in the user name or password (a '%' in it must be written %25)",
	"dial tcp", "connection refused", "connect to", "parse", "connecting", "\"", "\\",
}, "\n")

// FuzzRedactPassword builds URLs and DSNs with a password from random
// schemes, users, hosts, ports, paths and query strings — as a URL
// (scheme://user:pw@host:port/rest), a list of two such URLs, a
// go-sql-driver DSN (user:pw@tcp(host:port)/rest) and a key/value DSN
// (password=pw, quoted when it must be) — and checks every redaction path
// the CLI prints through: redact, redactErr, the redactor's writer (plain
// and %q) and each error of parseURL. The property: none of their output
// holds the password, as written, percent-decoded or %q-escaped.
func FuzzRedactPassword(f *testing.F) {
	f.Add(uint8(0), "postgres", "u", "S3CRET", "host", "5432", "/db?sslmode=disable")
	f.Add(uint8(0), "postgres", "u", "S3CRET", "host", "badport", "/db")
	f.Add(uint8(0), "postgres", "u", "S3C RET", "host", "", "/db")
	f.Add(uint8(0), "postgres", "u", "pa/S3CRET", "host", "", "/db")
	f.Add(uint8(0), "postgres", "u", "pa?S3CRET", "host", "", "/db")
	f.Add(uint8(0), "postgres", "u", "pa#S3CRET", "host", "", "/db")
	f.Add(uint8(0), "mysql", "u", "a%zzS3CRET", "host", "3306", "/db")
	f.Add(uint8(0), "mysql", "u", "p%40ss%2Fw", "host", "3306", "/db?parseTime=maybe")
	f.Add(uint8(0), "nats", "", "tok@en", "[::1]", "4222", "")
	f.Add(uint8(0), "redis", "", "p\"a'ss`w", "h", "6379", "/0")
	f.Add(uint8(0), "amqp", "guest", "gu\x00est", "h", "5672", "/vhost")
	f.Add(uint8(0), "kafka", "u", "sec\u202eret", "h", "9092", "")
	f.Add(uint8(0), "postgres", "u", "p:w:d", "h", "", "/db?password=other")
	f.Add(uint8(0), "postgres", "u", "a://b", "h", "", "")
	f.Add(uint8(0), "postgres", "u", "secret", "h", "", "?x=a@b")
	f.Add(uint8(1), "nats", "a", "S3CRET", "h1", "4222", "")
	f.Add(uint8(2), "mysql", "root", "S3CRET", "127.0.0.1", "3306", "/db?parseTime=true")
	f.Add(uint8(2), "mysql", "root", "S3C:RET@x", "", "", "/db")
	f.Add(uint8(3), "postgres", "u", "S3CRET", "host", "5432", "dbname=db sslmode=disable")
	f.Add(uint8(3), "postgres", "u", "S3C RET", "host", "5432", "")
	f.Fuzz(func(t *testing.T, form uint8, scheme, user, pw, host, port, rest string) {
		if len(pw) < minSecret || strings.Contains(redactVocabulary, pw) {
			return // see minSecret: only patterns mask short passwords
		}
		raw, ok := fuzzCredentialURL(form, scheme, user, pw, host, port, rest)
		if !ok {
			return
		}
		at := strings.Index(raw, pw)
		leaks := passwordForms(pw)
		for _, other := range []string{raw[:at], raw[at+len(pw):]} {
			for _, l := range leaks {
				if q := strconv.Quote(other); strings.Contains(other, l) || strings.Contains(q, l) {
					return // the password is not the only place this text is (%q's "\x000" holds "000")
				}
			}
		}
		var outputs []string
		outputs = append(outputs, redact(raw, raw))
		outputs = append(outputs, redactErr(fmt.Errorf("connect to %s: dial tcp: connection refused", raw), raw).Error())
		if _, err := url.Parse(raw); err != nil {
			outputs = append(outputs, redactErr(err, raw).Error())
		}
		if _, err := parseURL("--db", raw); err != nil {
			outputs = append(outputs, err.Error())
		}
		var r redactor
		r.add(raw)
		var buf bytes.Buffer
		w := r.writer(&buf)
		fmt.Fprintf(w, "connecting %s\n", raw)
		fmt.Fprintf(w, "connecting %q\n", raw)
		outputs = append(outputs, buf.String())
		for _, out := range outputs {
			for _, l := range leaks {
				if strings.Contains(out, l) {
					t.Fatalf("input %q: output holds the password (as %q):\n%s", raw, l, out)
				}
			}
		}
	})
}

// fuzzCredentialURL writes the fuzzed parts as a URL or DSN whose password
// is pw, or reports false if they cannot make one (a user with the
// password's delimiter in it, a host with an '@' that would move the
// userinfo's end).
func fuzzCredentialURL(form uint8, scheme, user, pw, host, port, rest string) (string, bool) {
	const userStop = ":@/?#\t\n\v\f\r \"'`(,"
	if strings.ContainsAny(user, userStop) || strings.ContainsAny(host+port+rest, "@") {
		return "", false
	}
	hostport := host
	if port != "" {
		hostport += ":" + port
	}
	switch form % 4 {
	case 0, 1:
		if scheme == "" || strings.ContainsAny(scheme, ":/?#@ \t\n\"'`,") || strings.Contains(pw, "://") {
			return "", false
		}
		u := scheme + "://" + user + ":" + pw + "@" + hostport + rest
		if form%4 == 1 { // a list of servers, as NATS takes
			return scheme + "://other@h0," + u, !strings.ContainsAny(pw+hostport+rest, ", ")
		}
		return u, true
	case 2:
		if strings.ContainsAny(pw, " \t\n\v\f\r\"'`") {
			return "", false // a DSN's password runs to a space or quote
		}
		return user + ":" + pw + "@tcp(" + hostport + ")" + rest, true
	default:
		kv := "host=" + strings.Map(noSpace, host) + " user=" + user
		switch {
		case !strings.ContainsAny(pw, " \t\n\v\f\r\"'`&;\\"):
			kv += " password=" + pw
		case !strings.ContainsAny(pw, "'\\"):
			kv += " password='" + pw + "'"
		default:
			return "", false
		}
		return kv + " " + rest, true
	}
}

func noSpace(r rune) rune {
	if strings.ContainsRune(" \t\n\v\f\r=", r) {
		return -1
	}
	return r
}

// passwordForms returns pw as it could appear in an output: as written,
// percent-decoded and %q-escaped; forms shorter than minSecret or part of
// the fixed text left out.
func passwordForms(pw string) []string {
	forms := []string{pw}
	if d, err := url.PathUnescape(pw); err == nil {
		forms = append(forms, d)
	}
	if d, err := url.QueryUnescape(pw); err == nil {
		forms = append(forms, d)
	}
	for _, f := range forms[:len(forms):len(forms)] {
		q := strconv.Quote(f)
		forms = append(forms, q[1:len(q)-1])
	}
	var out []string
	for _, f := range forms {
		if len(f) >= minSecret && !strings.Contains(redactVocabulary, f) {
			out = append(out, f)
		}
	}
	return out
}
