package resolver

import (
	"sync"
	"time"

	"github.com/musterhq/muster/internal/served"
)

// FakeClock is a clock for tests: its time moves only with Advance, which
// fires the lift timers it passes.
type FakeClock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*fakeTimer
}

// NewFakeClock returns a FakeClock at t.
func NewFakeClock(t time.Time) *FakeClock { return &FakeClock{t: t} }

// WithFakeClock makes the Builder's resolvers read protection's time from
// c and wait for its lifts on c's timers.
func WithFakeClock(c *FakeClock) Option { return func(o *options) { o.served.Clock = c } }

// Advance moves c's time on by d and fires the timers due by then.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	for _, t := range c.timers {
		c.fireLocked(t)
	}
}

func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *FakeClock) NewTimer() served.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clk: c, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// fireLocked fires t if it is armed and due. c.mu is held.
func (c *FakeClock) fireLocked(t *fakeTimer) {
	if !t.armed || t.at.After(c.t) {
		return
	}
	t.armed = false
	select {
	case t.ch <- c.t:
	default:
	}
}

type fakeTimer struct {
	clk   *FakeClock
	ch    chan time.Time
	at    time.Time // guarded by clk.mu
	armed bool      // guarded by clk.mu
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Reset(d time.Duration) {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	t.at, t.armed = t.clk.t.Add(d), true
	t.clk.fireLocked(t)
}

func (t *fakeTimer) Stop() {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	t.armed = false
}
