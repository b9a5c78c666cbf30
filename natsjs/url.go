package natsjs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/txbox/txbox/internal/brokerurl"
)

// ParseURL checks url, the servers of a NATS connection, and returns them
// one URL each, for nats.Connect (joined by commas) or nats.Options.Servers.
// url is a nats://, tls://, ws:// or wss:// URL, or a comma-separated list
// of them; a server without a scheme takes the first server's. A ',' in
// a password must be percent-encoded (%2C), since the list is split at
// commas. Errors quote no password.
//
//	servers, err := natsjs.ParseURL(os.Getenv("NATS_URL"))
//	nc, err := nats.Connect(strings.Join(servers, ","))
func ParseURL(url string) ([]string, error) {
	scheme, _, ok := strings.Cut(url, "://")
	if !ok {
		return nil, errors.New("natsjs: want a URL such as nats://host:4222 (or tls://, ws://, wss://)")
	}
	if brokerurl.ListSplitsPassword(url) {
		return nil, errors.New("natsjs: a ',' in a password must be percent-encoded (%2C): the URL is a list of servers split at commas")
	}
	items := brokerurl.Split(url)
	servers := make([]string, 0, len(items))
	for _, s := range items {
		if !strings.Contains(s, "://") {
			s = scheme + "://" + s
		}
		u, err := brokerurl.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("natsjs: server %q: %w", brokerurl.Redact(s), err)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return nil, fmt.Errorf("natsjs: server %q: unsupported scheme %q (want nats://, tls://, ws:// or wss://)", brokerurl.Redact(s), u.Scheme)
		}
		if u.Hostname() == "" {
			return nil, fmt.Errorf("natsjs: server %q: no host", brokerurl.Redact(s))
		}
		servers = append(servers, s)
	}
	return servers, nil
}
