package p2c

import (
	"sync/atomic"
	"time"
)

const (
	// timedEvery is the spacing of timed calls the sampler aims at: it
	// times fewer calls once they come closer than timedEvery/2 and more
	// once timed calls are over 2×timedEvery apart, so at most about
	// 100,000 calls a second per channel read the clock.
	timedEvery = int64(20 * time.Microsecond)
	// maxMask bounds the sampling: at least one call in maxMask+1 is timed.
	maxMask = 63
)

// sampler decides which calls are timed, one per balancer.
//
// Reading the clock twice per call costs more than the rest of a pick and
// its Done together, and latency estimates need far fewer samples than a
// busy channel makes calls. So while calls come further apart than
// timedEvery/2, every call is timed; faster than that, a random one in
// mask+1 (a power of two, up to maxMask+1) is, with mask doubled or halved
// at each timed call so that timed calls stay timedEvery/2 to 2×timedEvery
// apart. Calls that are not timed are counted by the estimates timed calls
// make (see load) and still report failures, which raise their endpoint's
// cost and count toward ejection at once.
//
// The time of the last timed pick is also the coarse clock that untimed
// picks decay costs to: behind the real one by the spacing of timed picks,
// a few times timedEvery on a busy channel. Ejection ends are checked
// against the real clock.
type sampler struct {
	mask  atomic.Uint32
	clock atomic.Int64 // nanotime of the last timed pick
	fixed bool         // tests: time every call
}

// coarse returns the time of the last timed pick.
func (s *sampler) coarse() int64 { return s.clock.Load() }

// tick records a timed pick at now and adapts the sampling to the time
// since the previous one.
func (s *sampler) tick(now int64) {
	if s.fixed {
		s.clock.Store(now)
		return
	}
	gap := now - s.clock.Swap(now)
	m := s.mask.Load()
	switch {
	case gap < timedEvery/2:
		if m < maxMask {
			s.mask.Store(m<<1 | 1)
		}
	case gap > (maxMask+1)*timedEvery:
		s.mask.Store(0) // the calls all but stopped: time every one again
	case gap > 2*timedEvery:
		s.mask.Store(m >> 1)
	}
}
