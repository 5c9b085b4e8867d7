package scale_test

import (
	"sync"
	"testing"
	"time"
)

// point is one observation: a list size, or a count of events.
type point struct {
	at    time.Time
	n     int
	stale bool
}

// timeline records observations in the order they happen, from any
// goroutine, and lets the benchmark wait for one.
type timeline struct {
	mu     sync.Mutex
	points []point
	ch     chan struct{}
}

func newTimeline() *timeline { return &timeline{ch: make(chan struct{}, 1)} }

func (t *timeline) add(p point) {
	t.mu.Lock()
	t.points = append(t.points, p)
	t.mu.Unlock()
	select {
	case t.ch <- struct{}{}:
	default:
	}
}

// all returns a copy of the points so far.
func (t *timeline) all() []point {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]point(nil), t.points...)
}

// wait waits until the last point satisfies ok, failing b after timeout.
func (t *timeline) wait(b *testing.B, timeout time.Duration, what string, ok func(point) bool) point {
	deadline := time.After(timeout)
	for {
		t.mu.Lock()
		var last point
		have := len(t.points) > 0
		if have {
			last = t.points[len(t.points)-1]
		}
		t.mu.Unlock()
		if have && ok(last) {
			return last
		}
		select {
		case <-t.ch:
		case <-deadline:
			b.Fatalf("%s: not within %v (last observation %d at %v)", what, timeout, last.n, last.at.Format(time.StampMilli))
		}
	}
}

// at returns the value in force at time x: that of the last point at or
// before x, or def if there is none.
func at(points []point, x time.Time, def int) int {
	v := def
	for _, p := range points {
		if p.at.After(x) {
			break
		}
		v = p.n
	}
	return v
}
