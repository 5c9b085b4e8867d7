package p2c

import (
	"math"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"

	"github.com/musterhq/muster/balancer/internal/lb"
)

const (
	// maxCost caps the cost failures can build up (ns): an endpoint that
	// keeps failing, and is not ejected, is tried again once its cost has
	// decayed below its peers' (after about decayTime × ln(maxCost / their
	// cost)).
	maxCost = 60e9
	// busyUnknown is the score of an endpoint without a cost per call in
	// flight: above any real score, so that it takes one call at a time
	// until the first completes.
	busyUnknown = 1e30
)

// load is an endpoint's load statistics, updated lock-free.
//
// The in-flight count and the count of successes are Horvitz–Thompson
// estimates: each timed call adds its weight, the inverse of the chance
// it had to be timed (see sampler). While every call is timed (below
// about 100,000 calls a second per channel) they are exact; above, their
// relative error shrinks with the count (about √(weight/count)).
type load struct {
	inFlight  atomic.Int64  // estimated calls picked and not yet done
	succeeded atomic.Uint64 // estimated calls that succeeded
	cost      atomic.Uint64 // float64 bits: latency estimate in ns; 0 = none yet
	stamp     atomic.Int64  // nanotime of the last sample (or seeding)
	// done is the Done callback of an untimed call, bound once per
	// endpoint (see untimedDone).
	done func(balancer.DoneInfo)
	_    [24]byte // pads the counters to a cache line of their own
}

// decay holds a decay time constant in the forms the hot path uses.
type decay struct {
	invTau float64 // 1/τ, τ in ns
	// small is the longest time (ns) whose decay, exp(−small/τ) ≥ 0.999,
	// is treated as none when reading a cost and as linear when blending
	// a sample: no division and no exp for an endpoint in steady use.
	small int64
	// medium is the longest time (ns) whose decay is computed as
	// 1 − x + x²/2 (x = dt/τ ≤ 1/64, within 7×10⁻⁷ of exp(−x)) rather
	// than with exp: an endpoint picked less often than others, but
	// picked, costs no exp either.
	medium int64
}

func newDecay(tau time.Duration) decay {
	return decay{invTau: 1 / float64(tau), small: int64(tau / 1024), medium: int64(tau / 64)}
}

// factor returns exp(−dt/τ) for dt > small.
func (d *decay) factor(dt int64) float64 {
	x := float64(dt) * d.invTau
	if dt <= d.medium {
		return 1 - x + x*x/2
	}
	return math.Exp(-x)
}

// costAt returns the cost decayed to now, 0 if none yet.
func (l *load) costAt(now int64, d *decay) float64 {
	c := math.Float64frombits(l.cost.Load())
	if c == 0 {
		return 0
	}
	if dt := now - l.stamp.Load(); dt > d.small {
		c *= d.factor(dt)
	}
	return c
}

// score is cost × (inFlight + 1), without the weight.
func (l *load) score(now int64, d *decay) float64 {
	pending := float64(max(l.inFlight.Load(), 0))
	c := l.costAt(now, d)
	if c == 0 {
		return pending * busyUnknown
	}
	return c * (pending + 1)
}

// observe accounts for a call that ended after rtt ns with the outcome
// (Success, Failure or Canceled). A canceled call only says that the
// latency is at least rtt: it can raise the cost, never lower it.
func (l *load) observe(rtt, now int64, out lb.Outcome, d *decay) {
	r := float64(max(rtt, 1))
	for {
		old := l.cost.Load()
		c := math.Float64frombits(old)
		var nc float64
		switch {
		case out == lb.Failure:
			nc = min(2*max(c, r), maxCost)
		case r >= c:
			nc = r
		case out == lb.Canceled:
			return
		default:
			// c×w + r×(1−w) with w = exp(−dt/τ); for a small dt,
			// 1 − w = dt/τ to within 0.05%.
			dt := max(now-l.stamp.Load(), 0)
			if dt <= d.small {
				nc = c - (c-r)*float64(dt)*d.invTau
			} else {
				w := d.factor(dt)
				nc = c*w + r*(1-w)
			}
		}
		if l.cost.CompareAndSwap(old, math.Float64bits(nc)) {
			l.stamp.Store(now)
			return
		}
	}
}
