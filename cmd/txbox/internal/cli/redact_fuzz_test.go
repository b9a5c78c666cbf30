package cli

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// canary is put into every fuzzed password (at a position the input
// picks), and no other part of a fuzzed URL may hold its letters: the
// property is then exact. A 'Q', 'Z' or 'J' in an output can only come from
// the password (the fixed text the CLI and its libraries print around a URL
// holds none of them, and %q-escaping and percent-decoding never make
// them), so one such letter anywhere in an output is a leak, of the whole
// password or of any piece of it that holds a canary letter, and never a
// coincidence (an earlier property that looked for the password's text
// found short passwords such as "000" in the %q-quoting of the rest of the
// URL).
const canary = "QZJ"

// FuzzRedactPassword builds URLs and DSNs with a password from random
// schemes, users, hosts, ports, paths and query strings — as a URL
// (scheme://user:pw@host:port/rest), a list of two such URLs, a
// go-sql-driver DSN (user:pw@tcp(host:port)/rest) and a key/value DSN
// (password=pw, quoted when it must be) — and checks every path through
// which the CLI prints a URL: redact, redactErr, the redactor's writer
// (plain and %q), each error of parseURL, of the --db parser (parseDBFrom,
// with mysqlDSNFrom) and of the broker URL check (checkBrokerURL), and a
// parsed --db target's String. The property: with canary in the password
// (see canary), no output holds a letter of the canary.
func FuzzRedactPassword(f *testing.F) {
	f.Add(uint8(0), "postgres", "u", "S3CRET", "host", "5432", "/db?sslmode=disable")
	f.Add(uint8(0), "postgres", "u", "S3CRET", "host", "badport", "/db")
	f.Add(uint8(0), "postgres", "u", "S3C RET", "host", "", "/db")
	f.Add(uint8(0), "postgres", "u", "pa/S3CRET", "host", "", "/db")
	f.Add(uint8(4), "postgres", "u", "pa?S3CRET", "host", "", "/db")
	f.Add(uint8(8), "postgres", "u", "pa#S3CRET", "host", "", "/db")
	f.Add(uint8(12), "mysql", "u", "a%zzS3CRET", "host", "3306", "/db")
	f.Add(uint8(0), "mysql", "u", "p%40ss%2Fw", "host", "3306", "/db?parseTime=maybe")
	f.Add(uint8(0), "mysql", "u", "p%51ss", "host", "3306", "/db")
	f.Add(uint8(0), "nats", "", "tok@en", "[::1]", "4222", "")
	f.Add(uint8(0), "redis", "", "p\"a'ss`w", "h", "6379", "/0")
	f.Add(uint8(0), "amqp", "guest", "gu\x00est", "h", "5672", "/vhost")
	f.Add(uint8(0), "kafka", "u", "sec\u202eret", "h", "9092", "")
	f.Add(uint8(0), "postgres", "u", "p:w:d", "h", "", "/db?password=other")
	f.Add(uint8(0), "postgres", "u", "a://b", "h", "", "")
	f.Add(uint8(0), "postgres", "u", "secret", "h", "", "?x=a@b")
	f.Add(uint8(0), "postgres", "u", "", "h", "", "/db")
	f.Add(uint8(0), "nats", "u", ",x", "h", "4222", "")
	f.Add(uint8(8), "kafka", "u", "a,b/", "h", "9092", "")
	f.Add(uint8(1), "nats", "a", "S3CRET", "h1", "4222", "")
	f.Add(uint8(2), "mysql", "root", "S3CRET", "127.0.0.1", "3306", "/db?parseTime=true")
	f.Add(uint8(2), "mysql", "root", "S3C:RET@x", "", "", "/db")
	f.Add(uint8(3), "postgres", "u", "S3CRET", "host", "5432", "dbname=db sslmode=disable")
	f.Add(uint8(3), "postgres", "u", "S3C RET", "host", "5432", "")
	f.Fuzz(func(t *testing.T, form uint8, scheme, user, pw, host, port, rest string) {
		for _, part := range []string{scheme, user, host, port, rest} {
			if spellsCanary(part) {
				return // only the password may hold the canary's letters
			}
		}
		at := int(form/4) % (len(pw) + 1)
		pw = pw[:at] + canary + pw[at:]
		raw, ok := fuzzCredentialURL(form, scheme, user, pw, host, port, rest)
		if !ok || strings.HasPrefix(raw, "sqlite:") {
			return // sqlite: is followed by a file name, which holds no password
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
		if target, err := parseDBFrom("--db", raw); err != nil {
			outputs = append(outputs, err.Error())
		} else {
			outputs = append(outputs, target.String())
		}
		if _, err := checkBrokerURL("--broker", raw); err != nil {
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
			if i := strings.IndexAny(out, canary); i >= 0 {
				t.Fatalf("input %q (password %q): output holds a letter of the password, %q at byte %d:\n%s", raw, pw, out[i], i, out)
			}
		}
	})
}

// spellsCanary reports whether s holds a letter of canary, as written or
// percent-encoded (%51, %5A, %4A in either case).
func spellsCanary(s string) bool {
	if strings.ContainsAny(s, canary) {
		return true
	}
	u := strings.ToUpper(s)
	for _, c := range canary {
		if strings.Contains(u, fmt.Sprintf("%%%02X", c)) {
			return true
		}
	}
	return false
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
