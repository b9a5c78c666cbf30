// Package hostcheck refuses HTTP requests whose Host header names neither
// a loopback address nor a host the operator allowed. A web page whose
// name an attacker points at 127.0.0.1 (DNS rebinding) reaches a server on
// loopback as a same-origin page, but its requests carry the attacker's
// name as Host: checking Host is what tells them apart.
package hostcheck

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Loopback reports whether host (a Host header, or a name or address
// without port) names loopback: localhost or a name under .localhost
// (which no DNS server can answer for), an address of 127.0.0.0/8 or ::1.
// Any port is accepted: a browser sends the Host of the URL it connects
// to, and a port mapping may change the port on the way.
func Loopback(host string) bool {
	name, _ := split(host)
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// Allowed reports whether host (a request's Host) is Loopback or one of
// allowed: a name or address, whose port, when it has one, must match too.
// Names compare without case and without a final dot.
func Allowed(host string, allowed []string) bool {
	if Loopback(host) {
		return true
	}
	name, port := split(host)
	if name == "" {
		return false
	}
	for _, a := range allowed {
		aname, aport := split(a)
		if aname == name && (aport == "" || aport == port) {
			return true
		}
	}
	return false
}

// Validate checks the hosts an operator allows (a flag's values, named
// flag in the error): each a name or address with an optional port, no
// scheme, path or wildcard.
func Validate(flag string, hosts []string) error {
	for _, h := range hosts {
		name, port := split(h)
		switch {
		case name == "":
			return fmt.Errorf("%s %q: want a host name or address, with an optional :port", flag, h)
		case strings.ContainsAny(h, "/?#@*\\ \t") || strings.ContainsFunc(h, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return fmt.Errorf("%s %q: want a host name or address (such as dash.example.com or dash.example.com:8443), not a URL or a pattern", flag, h)
		case port != "" && strings.Trim(port, "0123456789") != "":
			return fmt.Errorf("%s %q: the port %q is not a number", flag, h, port)
		}
	}
	return nil
}

// split returns host's name (lower case, without brackets and final dot)
// and port ("" when it has none).
func split(host string) (name, port string) {
	name = host
	if h, p, err := net.SplitHostPort(host); err == nil {
		name, port = h, p
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	return strings.TrimSuffix(strings.ToLower(name), "."), port
}

// Handler serves next the requests whose Host is Allowed and answers the
// others 421 Misdirected Request with a short plain reason that ends with
// hint (how to allow a name).
func Handler(next http.Handler, allowed []string, hint string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Allowed(r.Host, allowed) {
			Refuse(w, r, hint)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Refuse answers r 421 Misdirected Request: its Host is not allowed.
func Refuse(w http.ResponseWriter, r *http.Request, hint string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusMisdirectedRequest)
	fmt.Fprintf(w, "txbox: refused: the request's Host %q is neither loopback nor an allowed host (protection from DNS rebinding); %s\n", r.Host, hint)
}
