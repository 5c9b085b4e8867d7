package resolver

import "time"

// clock is how a resolver reads the time its protection decides by and
// waits for protection to lift. It is the real clock but in tests
// (export_test.go), which move time on to see a lift that a real window
// would make slow to wait for.
type clock interface {
	now() time.Time
	// newTimer returns a stopped timer.
	newTimer() liftTimer
}

// liftTimer is the timer a resolver sets for protection's next lift.
type liftTimer interface {
	// c is the channel the timer fires on.
	c() <-chan time.Time
	// reset sets the timer to fire after d.
	reset(d time.Duration)
	stop()
}

type realClock struct{}

func (realClock) now() time.Time { return time.Now() }

func (realClock) newTimer() liftTimer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return realTimer{t}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) c() <-chan time.Time   { return r.t.C }
func (r realTimer) reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) stop()                 { r.t.Stop() }
