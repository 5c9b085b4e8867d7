package balancersuite

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEjectionTimeline checks the reading of a failing backend's arrivals
// on made-up timelines: base 1 s, then 2 s.
func TestEjectionTimeline(t *testing.T) {
	t0 := time.Now()
	ms := func(ns ...int) []time.Time {
		at := make([]time.Time, len(ns))
		for i, n := range ns {
			at[i] = t0.Add(time.Duration(n) * time.Millisecond)
		}
		return at
	}
	burst := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11} // 5 failures, 7 in flight
	with := func(more ...int) []int { return append(append([]int(nil), burst...), more...) }
	for _, c := range []struct {
		name   string
		at     []int
		stop   int // ms
		probes int
		bad    string // a part of the first complaint; "" for none
	}{
		{"ejected, then a probe per end", with(1005, 3010), 4000, 2, ""},
		{"the run stops before an end is due", with(1005), 2500, 1, ""},
		{"the last end is too near the stop to require its probe", with(1005), 3100, 1, ""},
		{"never ejected", []int{0, 1, 2, 3}, 4000, 0, ""},
		{"a call after the calls in flight", with(600), 1000, 0, "while ejected"},
		{"one call too many in flight", with(12), 900, 0, "13 calls arrived"},
		{"two calls at an ejection end", with(1005, 1006), 1500, 1, "after probe 1"},
		{"a call before the next end", with(1005, 2900), 3500, 1, "after probe 1"},
		{"no probe at an end", burst, 4000, 0, "no probe"},
		{"a late probe", with(1600), 2000, 1, "probe 1 arrived"},
	} {
		probes, bad := ejectionTimeline(ms(c.at...), t0.Add(time.Duration(c.stop)*time.Millisecond), time.Second, 2*time.Second)
		switch {
		case probes != c.probes:
			t.Errorf("%s: %d probes, want %d (%q)", c.name, probes, c.probes, bad)
		case c.bad == "" && len(bad) > 0:
			t.Errorf("%s: %q, want no complaint", c.name, bad)
		case c.bad != "" && (len(bad) == 0 || !strings.Contains(bad[0], c.bad)):
			t.Errorf("%s: %q, want a complaint with %q", c.name, bad, c.bad)
		}
	}
}
