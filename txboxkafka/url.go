package txboxkafka

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/txbox/txbox/internal/brokerurl"
)

// ParseURL returns the seed brokers of url, kafka://host:9092 or a
// comma-separated list kafka://host1:9092,host2:9092, for kgo.SeedBrokers.
// A path or query after the hosts is ignored. The URL takes no user name or
// password: give SASL and TLS to kgo.NewClient as options. Errors quote no
// password.
//
//	seeds, err := txboxkafka.ParseURL(os.Getenv("KAFKA_URL"))
//	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
func ParseURL(url string) ([]string, error) {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok || scheme != "kafka" {
		return nil, errors.New("txboxkafka: want kafka://host:9092[,host2:9092]")
	}
	if strings.Contains(rest, "@") { // anywhere: a '/' or '?' in a password would hide it
		return nil, errors.New("txboxkafka: kafka:// takes no user name or password")
	}
	hosts, _, _ := strings.Cut(rest, "/")
	hosts, _, _ = strings.Cut(hosts, "?")
	seeds := brokerurl.Split(hosts)
	if len(seeds) == 0 {
		return nil, errors.New("txboxkafka: want kafka://host:9092[,host2:9092]")
	}
	for _, seed := range seeds {
		if host, port, err := net.SplitHostPort(seed); err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("txboxkafka: seed %q: want host:port", seed)
		}
	}
	return seeds, nil
}
