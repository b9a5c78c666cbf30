package testenv

import (
	"testing"
	"time"
)

// Stall is how long Await waits while what it watches does not change.
const Stall = 3 * time.Minute

// Await polls cond every 20 ms until it holds. cond also says what it saw;
// the wait fails only after that stayed the same for Stall, so a slow
// machine that keeps making progress is never failed for being slow. A
// cond that shows nothing ("") is bounded by Stall as a whole: give it a
// state whenever the wait has progress to show.
func Await(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	last, since := "", time.Now()
	for {
		ok, state := cond()
		if ok {
			return
		}
		if state != last {
			last, since = state, time.Now()
		}
		if time.Since(since) > Stall {
			if state != "" {
				t.Fatalf("no progress for %s waiting for: %s: %s", Stall, what, state)
			}
			t.Fatalf("no progress for %s waiting for: %s", Stall, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
