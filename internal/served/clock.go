package served

import "time"

// Clock is how a follower reads the time its protection and deletion grace
// decide by, and waits for them to lift. It is the real clock but in
// tests, which move time on to see a lift that a real window would make
// slow to wait for.
type Clock interface {
	Now() time.Time
	// NewTimer returns a stopped timer.
	NewTimer() Timer
}

// Timer is the timer a follower sets for protection's next lift or a
// hold's end.
type Timer interface {
	// C is the channel the timer fires on.
	C() <-chan time.Time
	// Reset sets the timer to fire after d.
	Reset(d time.Duration)
	Stop()
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return realTimer{t}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }
