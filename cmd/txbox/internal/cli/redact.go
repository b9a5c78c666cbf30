package cli

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/txbox/txbox/internal/brokerurl"
)

// secretMask replaces every secret the CLI redacts (as url.URL.Redacted).
const secretMask = "xxxxx"

// minSecret is the shortest password that redact masks wherever it occurs
// in a text; shorter ones are masked only where a pattern finds them (in a
// URL's userinfo or a password= parameter), so that a one-letter password
// does not mask every such letter.
const minSecret = 3

var (
	// scheme://user:PASSWORD@: the password runs to the last '@' before a
	// space or a quote, as url.Parse reads it.
	urlPassword = regexp.MustCompile("(?i)\\b([a-z][a-z0-9+.-]*://[^\\s:/?#@\"'`]*:)[^\\s\"'`]*@")
	// go-sql-driver/mysql DSN: user:PASSWORD@tcp(host:port)/db.
	dsnPassword = regexp.MustCompile("(^|[\\s\"'`(])([^\\s:/@\"'`(]*:)[^\\s\"'`]*@((?:tcp6?|udp|unix)?\\()")
)

// redact returns s with its secrets masked: the password of every URL's
// userinfo (scheme://user:xxxxx@host, also in a list of servers and inside
// errors that quote a URL), of go-sql-driver DSNs (user:xxxxx@tcp(…)),
// password= key/value parameters, and every password found in sources (the
// URLs and arguments the user gave, see secretsOf) wherever it occurs, also
// percent-decoded and quoted as %q quotes it. It is the one function through
// which the CLI passes what it prints: URLs in messages, errors, logs and
// command output (see redactor).
func redact(s string, sources ...string) string { return mask(s, secretsOf(sources...)) }

// mask masks the known secrets of secretsOf, then the patterns of redact.
// The secrets' occurrences are found in s as given and each run of
// overlapping ones masked as one: masked one after the other, a secret
// could cut another that overlaps it (a lenient reading of a key/value DSN
// such as "host=[::1] password=a@b" finds ":1] password=a" beside "a@b",
// and masking the first left "b" in the output).
func mask(s string, secrets []string) string {
	s = maskSpans(s, secrets)
	s = urlPassword.ReplaceAllString(s, "${1}"+secretMask+"@")
	s = dsnPassword.ReplaceAllString(s, "${1}${2}"+secretMask+"@${3}")
	return brokerurl.KVPassword.ReplaceAllString(s, "${1}"+secretMask)
}

// maskSpans replaces every occurrence of each of secrets in s with
// secretMask, occurrences that overlap or touch as one.
func maskSpans(s string, secrets []string) string {
	type span struct{ from, to int }
	var spans []span
	for _, sec := range secrets {
		if sec == "" {
			continue
		}
		for at := 0; ; {
			i := strings.Index(s[at:], sec)
			if i < 0 {
				break
			}
			spans = append(spans, span{at + i, at + i + len(sec)})
			at += i + 1
		}
	}
	if len(spans) == 0 {
		return s
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	var b strings.Builder
	last := 0 // s[:last] is written
	cur := spans[0]
	flush := func() {
		b.WriteString(s[last:cur.from])
		b.WriteString(secretMask)
		last = cur.to
	}
	for _, sp := range spans[1:] {
		if sp.from <= cur.to {
			cur.to = max(cur.to, sp.to)
			continue
		}
		flush()
		cur = sp
	}
	flush()
	b.WriteString(s[last:])
	return b.String()
}

// secretsOf returns the passwords in values, leniently, so that it finds
// them in URLs that url.Parse refuses (a bad port, a space in the password,
// no scheme): the userinfo of each scheme://user:pass@ (to the last '@'),
// of a scheme-less user:pass@host, and password= parameters; each also
// percent-decoded and %q-escaped. Longest first; shorter than minSecret
// left out. sqlite: URLs hold no secrets.
func secretsOf(values ...string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		variants := []string{p}
		if d, err := url.PathUnescape(p); err == nil {
			variants = append(variants, d)
		}
		if d, err := url.QueryUnescape(p); err == nil {
			variants = append(variants, d)
		}
		for _, v := range variants {
			q := strconv.Quote(v)
			for _, w := range []string{v, q[1 : len(q)-1]} {
				if len(w) >= minSecret && !seen[w] {
					seen[w] = true
					out = append(out, w)
				}
			}
		}
	}
	for _, v := range values {
		if strings.HasPrefix(v, "sqlite:") || !strings.ContainsAny(v, "@=") {
			continue
		}
		for _, pw := range brokerurl.Passwords(v) {
			add(pw)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// redactor masks the secrets of the values the user gave (arguments,
// environment, flags) in everything a command writes.
type redactor struct {
	mu      sync.Mutex
	sources []string
	secrets []string
}

// add makes the secrets in values known.
func (r *redactor) add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sources = append(r.sources, values...)
	r.secrets = secretsOf(r.sources...)
}

func (r *redactor) redact(s string) string {
	r.mu.Lock()
	secrets := r.secrets
	r.mu.Unlock()
	return mask(s, secrets)
}

// writer returns w behind r: each Write is redacted as a whole (slog writes
// a record at a time, tabwriter a cell at a time, fmt a call at a time).
func (r *redactor) writer(w io.Writer) io.Writer { return redactWriter{r, w} }

type redactWriter struct {
	r *redactor
	w io.Writer
}

func (w redactWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, w.r.redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// redactedError is an error whose message is redacted; Unwrap gives the
// original, for errors.Is.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactErr returns err with its message redacted (see redact). A
// url.Parse error in it (which quotes the URL cut at its '#', and may quote
// a piece of a password) is told again about the source it came from: that
// whole source quoted, so that its password is masked, and what is wrong
// said as brokerurl.Why says it.
func redactErr(err error, sources ...string) error {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		raw := ue.URL
		for _, src := range sources {
			if strings.HasPrefix(src, ue.URL) {
				raw = src
				break
			}
		}
		msg = strings.Replace(msg, ue.Error(), fmt.Sprintf("%s %q: %s", ue.Op, raw, brokerurl.Why(raw, ue.Err)), 1)
	}
	return &redactedError{msg: redact(oneLine(msg), sources...), err: err}
}

// oneLine joins the lines of a message that spans several, as pgx's
// connect error does (one line per address and TLS mode tried, each
// indented by a tab), with "; ", dropping repeated lines: an error is one
// line of a log or of the CLI's output.
func oneLine(msg string) string {
	if !strings.Contains(msg, "\n") {
		return msg
	}
	var parts []string
	for line := range strings.SplitSeq(msg, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !slices.Contains(parts, line) {
			parts = append(parts, line)
		}
	}
	out := ""
	for i, p := range parts {
		switch {
		case i == 0:
		case strings.HasSuffix(parts[i-1], ":"):
			out += " "
		default:
			out += "; "
		}
		out += p
	}
	return out
}

// parseURL parses raw, the value of the flag or variable name, with
// url.Parse; its error names name and says what is wrong without the
// password (see brokerurl.Why).
func parseURL(name, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err == nil {
		return u, nil
	}
	return nil, fmt.Errorf("%s %q: malformed URL: %s", name, redact(raw, raw), redact(brokerurl.Why(raw, err), raw))
}
