package demo

import (
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
		why    string
	}{
		{nil, 0.5, 0, "no values"},
		{ms(7), 0.5, 7 * time.Millisecond, "one value is every percentile"},
		{ms(7), 0.99, 7 * time.Millisecond, "one value is every percentile"},
		{ms(1, 2), 0.5, 1 * time.Millisecond, "half the values are at or below the first"},
		{ms(1, 2), 0.99, 2 * time.Millisecond, "P99 of two is the larger (was the smaller)"},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond, "rank ceil(0.5*4) = 2"},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond, "rank ceil(9.9) = 10"},
	} {
		if got := percentile(c.sorted, c.p); got != c.want {
			t.Errorf("percentile(%v, %v) = %v, want %v: %s", c.sorted, c.p, got, c.want, c.why)
		}
	}
}

// TestP99NeverBelowP50: for any number of calls, the table's P99 is at
// least its P50, and percentiles of fewer than minCallsForPercentiles
// calls are not shown.
func TestP99NeverBelowP50(t *testing.T) {
	for n := 1; n <= 300; n++ {
		st := newStats()
		st.setPhase("p")
		for i := 0; i < n; i++ {
			// Descending, so that an unsorted read would show it.
			st.record("b", time.Duration(n-i)*time.Millisecond, nil)
		}
		rows, _, _ := st.second()
		r := rows["b"]
		if r.calls != n {
			t.Fatalf("%d calls recorded, row says %d", n, r.calls)
		}
		if n < minCallsForPercentiles {
			if r.p50 != 0 || r.p99 != 0 {
				t.Fatalf("%d calls: percentiles %v/%v shown below the threshold of %d", n, r.p50, r.p99, minCallsForPercentiles)
			}
			continue
		}
		if r.p99 < r.p50 {
			t.Fatalf("%d calls: P99 %v below P50 %v", n, r.p99, r.p50)
		}
		if want := time.Duration((n+1)/2) * time.Millisecond; r.p50 != want {
			t.Fatalf("%d calls of 1..%dms: P50 %v, want %v", n, n, r.p50, want)
		}
	}
}
