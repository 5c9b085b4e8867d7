package registrytest

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// Arrivals records the first time each numbered item (an instance, an
// endpoint count) was seen, for latency benchmarks: the benchmark notes the
// start, makes a change, and waits for its number.
type Arrivals struct {
	mu   sync.Mutex
	seen map[int]time.Time
	ch   chan struct{}
}

// NewArrivals returns an empty recorder.
func NewArrivals() *Arrivals {
	return &Arrivals{seen: map[int]time.Time{}, ch: make(chan struct{}, 1)}
}

// Mark records that item i was seen at at, unless it was seen before. It
// is safe to call from any goroutine.
func (a *Arrivals) Mark(i int, at time.Time) {
	a.mu.Lock()
	if _, ok := a.seen[i]; !ok {
		a.seen[i] = at
	}
	a.mu.Unlock()
	select {
	case a.ch <- struct{}{}:
	default:
	}
}

// Wait returns when item i was first seen, failing b if it is not seen
// within 10s.
func (a *Arrivals) Wait(b testing.TB, i int) time.Time {
	timeout := time.After(10 * time.Second)
	for {
		a.mu.Lock()
		at, ok := a.seen[i]
		a.mu.Unlock()
		if ok {
			return at
		}
		select {
		case <-a.ch:
		case <-timeout:
			b.Fatalf("item %d not seen within 10s", i)
		}
	}
}

// ReportPercentiles reports the p50 and p99 of lat (sorted in place) in
// microseconds, and zeroes ns/op, which for these benchmarks measures the
// setup rather than the result.
func ReportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(0, "ns/op")
}
