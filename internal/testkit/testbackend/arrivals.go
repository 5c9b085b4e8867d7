package testbackend

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// arrivals is a Backend's log of when its unary calls arrived, kept only
// while on: a backend serving a long benchmark keeps nothing.
type arrivals struct {
	on atomic.Bool
	mu sync.Mutex
	at []time.Time
}

// add logs a call arriving now, when the log is on.
func (a *arrivals) add() {
	if !a.on.Load() {
		return
	}
	now := time.Now()
	a.mu.Lock()
	a.at = append(a.at, now)
	a.mu.Unlock()
}

// RecordArrivals starts a log of when each unary call arrives (before its
// delay or failure), emptying the log kept so far. The times carry the
// monotonic clock: compare them with times the test reads in the same
// process, not with wall clocks.
func (b *Backend) RecordArrivals() {
	b.arrivals.mu.Lock()
	b.arrivals.at = nil
	b.arrivals.mu.Unlock()
	b.arrivals.on.Store(true)
}

// Arrivals returns when the calls arrived since RecordArrivals, in order
// of arrival; nil if RecordArrivals was never called.
func (b *Backend) Arrivals() []time.Time {
	b.arrivals.mu.Lock()
	defer b.arrivals.mu.Unlock()
	at := slices.Clone(b.arrivals.at)
	// Calls that arrive together may take the lock out of order.
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	return at
}
