package cli

import "testing"

// The dashboard's relay panel says which Kafka producer the relay runs:
// transactional with its id, or idempotent; nothing for other brokers.
func TestBrokerMode(t *testing.T) {
	for _, tc := range []struct {
		f    brokerFlags
		want string
	}{
		{brokerFlags{url: "kafka://127.0.0.1:9092", kafkaTxnID: "orders-relay-1"}, "Kafka, transactional id orders-relay-1"},
		{brokerFlags{url: "kafka://127.0.0.1:9092"}, "Kafka, idempotent producer (no transactions)"},
		{brokerFlags{url: "nats://127.0.0.1:4222"}, ""},
		{brokerFlags{}, ""},
	} {
		if got := tc.f.mode(); got != tc.want {
			t.Errorf("%+v: mode %q, want %q", tc.f, got, tc.want)
		}
	}
}
