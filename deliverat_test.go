package txbox

import (
	"errors"
	"testing"
	"time"
)

// deliverAt keeps the instant (any zone, no monotonic reading), rounds it
// up to the microsecond, and makes a time not after now "at once".
func TestDeliverAt(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	east := time.FixedZone("east", 5*3600)
	cases := []struct {
		name string
		in   time.Time
		want time.Time
	}{
		{"zero", time.Time{}, time.Time{}},
		{"far in the past", time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{}},
		{"now itself", now, time.Time{}},
		{"ahead, in another zone", now.Add(time.Hour).In(east), now.Add(time.Hour)},
		{"a nanosecond ahead is a microsecond ahead", now.Add(time.Nanosecond), now.Add(time.Microsecond)},
		{"rounded up, never down", now.Add(time.Second + 1500*time.Nanosecond), now.Add(time.Second + 2*time.Microsecond)},
		{"whole microseconds kept", now.Add(3 * time.Microsecond), now.Add(3 * time.Microsecond)},
	}
	for _, c := range cases {
		m := Message{DeliverAt: c.in}
		got := m.deliverAt(now)
		if !got.Equal(c.want) || (!got.IsZero() && got.Location() != time.UTC) {
			t.Errorf("%s: deliverAt(%s) = %s, want %s in UTC", c.name, c.in, got, c.want)
		}
	}
	// A monotonic reading is dropped: the stored time is the wall clock's.
	mono := time.Now().Add(time.Hour)
	m := Message{DeliverAt: mono}
	if got := m.deliverAt(time.Now()); got.Round(0) != got || got.Before(mono.Round(0)) {
		t.Errorf("deliverAt of a monotonic time: %s", got)
	}
}

func TestDeliverAtBeyondMax(t *testing.T) {
	m := Message{Topic: "t", DeliverAt: MaxDeliverAt.Add(time.Microsecond)}
	err := m.Validate(0)
	var ime *InvalidMessageError
	if !errors.As(err, &ime) || ime.Field != "deliver_at" {
		t.Fatalf("Validate of DeliverAt past MaxDeliverAt: %v", err)
	}
	if err := (&Message{Topic: "t", DeliverAt: MaxDeliverAt}).Validate(0); err != nil {
		t.Fatalf("Validate of DeliverAt = MaxDeliverAt: %v", err)
	}
}
