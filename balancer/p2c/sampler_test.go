package p2c

import (
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"

	"github.com/musterhq/muster/balancer/internal/lb"
)

func TestSamplingFollowsTheCallRate(t *testing.T) {
	var s sampler
	now := int64(time.Hour)
	step := func(gap time.Duration, n int) uint32 {
		for range n {
			now += int64(gap)
			s.tick(now)
		}
		return s.mask.Load()
	}
	if m := step(time.Millisecond, 10); m != 0 {
		t.Fatalf("mask = %d with timed calls 1ms apart, want 0 (every call timed)", m)
	}
	if m := step(time.Microsecond, 20); m != maxMask {
		t.Fatalf("mask = %d with timed calls 1µs apart, want the cap %d", m, maxMask)
	}
	// About timedEvery apart: no change.
	if m := step(time.Duration(timedEvery), 10); m != maxMask {
		t.Fatalf("mask = %d with timed calls %v apart, want it kept at %d", m, time.Duration(timedEvery), maxMask)
	}
	if m := step(time.Duration(3*timedEvery), 1); m != maxMask>>1 {
		t.Fatalf("mask = %d after a gap of 3×timedEvery, want it halved to %d", m, maxMask>>1)
	}
	// The calls all but stop: back to timing every call at once.
	step(time.Microsecond, 20)
	if m := step(time.Second, 1); m != 0 {
		t.Fatalf("mask = %d after a 1s gap, want 0", m)
	}
	if got := s.coarse(); got != now {
		t.Fatalf("coarse clock = %d, want the last timed pick's %d", got, now)
	}
}

// sampledPicker returns a picker over n endpoints (cost 1ms) that times one
// call in 64, as a busy channel's does.
func sampledPicker(det *lb.Detector, n int) *picker {
	var eps []testEndpoint
	for i := range n {
		eps = append(eps, testEndpoint{addr: string(rune('a' + i)), cost: time.Millisecond})
	}
	p := newTestPicker(&fakeClock{t: nanotime()}, det, eps...)
	p.sampler.mask.Store(maxMask) // fixed: no adaptation
	return p
}

func TestUntimedFailuresEjectAtOnce(t *testing.T) {
	det := new(lb.Detector)
	det.SetConfig(lb.DefaultOutlierConfig())
	p := sampledPicker(det, 4)
	before := make([]float64, len(p.eps))
	for i, e := range p.eps {
		before[i] = math.Float64frombits(e.e.Stats.cost.Load())
	}
	// Every call fails; the first 5 to an endpoint eject it, whether they
	// were timed or not, until the share cap (2 of 4) stops ejections.
	for range 200 {
		res, err := p.Pick(balancer.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		res.Done(failed)
	}
	ejected := 0
	for i, e := range p.eps {
		if e.e.Outlier.Ejected() {
			ejected++
		}
		if c := math.Float64frombits(e.e.Stats.cost.Load()); c <= before[i] {
			t.Errorf("%s: cost %v after failures, want above %v", e.e.Addr, time.Duration(c), time.Duration(before[i]))
		}
	}
	if ejected != 2 {
		t.Fatalf("%d endpoints ejected after 200 failed calls, want 2 (the 50%% cap)", ejected)
	}
}

func TestSampledCountsEstimateTheCalls(t *testing.T) {
	det := new(lb.Detector)
	det.SetConfig(lb.DefaultOutlierConfig())
	p := sampledPicker(det, 5)
	const n = 64000
	dones := make([]func(balancer.DoneInfo), 0, n)
	for range n {
		res, err := p.Pick(balancer.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, res.Done)
	}
	// With weight 64 per timed call, the estimate of n calls has a
	// standard deviation of √(63n) ≈ 2,000: ±10,000 is 5 of them.
	const tolerance = 10000
	sum := func(f func(l *load) int64) int64 {
		var s int64
		for _, e := range p.eps {
			s += f(&e.e.Stats)
		}
		return s
	}
	inFlight := sum(func(l *load) int64 { return l.inFlight.Load() })
	if inFlight < n-tolerance || inFlight > n+tolerance {
		t.Fatalf("estimated calls in flight = %d with %d in flight, want within ±%d", inFlight, n, tolerance)
	}
	for _, d := range dones {
		d(ok)
	}
	for _, e := range p.eps {
		if got := e.e.Stats.inFlight.Load(); got != 0 {
			t.Fatalf("%s: estimated calls in flight = %d after every Done, want exactly 0", e.e.Addr, got)
		}
	}
	succeeded := sum(func(l *load) int64 { return int64(l.succeeded.Load()) })
	if succeeded < n-tolerance || succeeded > n+tolerance {
		t.Fatalf("estimated successes = %d after %d, want within ±%d", succeeded, n, tolerance)
	}
}

func TestHungEndpointIsAvoidedWhenCallsAreSampled(t *testing.T) {
	det := new(lb.Detector)
	det.SetConfig(lb.DefaultOutlierConfig())
	p := sampledPicker(det, 5)
	for i := range p.eps {
		p.eps[i].picker = indexPicker(i)
	}
	hung := p.eps[0].e
	const n = 20000
	toHung := 0
	var held []func(balancer.DoneInfo)
	for range n {
		res, err := p.Pick(balancer.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if res.SubConn.(indexedSubConn).i == 0 {
			toHung++
			held = append(held, res.Done) // never answers (until the end)
			continue
		}
		res.Done(ok)
	}
	// Fair share would be n/5 = 4,000. The hung endpoint's estimated
	// in-flight count jumps by 64 at its first timed call (after a
	// geometric number of calls, mean 64: more than 1,000 has odds of
	// (63/64)^1000 ≈ 2×10⁻⁷) and never comes down while its calls hang;
	// from then on it loses every comparison.
	if toHung > 1000 {
		t.Fatalf("hung endpoint got %d of %d calls with one call in 64 timed, want at most 1,000", toHung, n)
	}
	for _, d := range held {
		d(ok)
	}
	if got := hung.Stats.inFlight.Load(); got != 0 {
		t.Fatalf("estimated calls in flight = %d after every Done, want 0", got)
	}
}

// indexPicker is a child picker whose SubConn tells which endpoint was
// picked.
type indexPicker int

func (i indexPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: indexedSubConn{i: int(i)}}, nil
}

type indexedSubConn struct {
	balancer.SubConn // nil: only the type and index are used
	i                int
}

func TestCallsMetricCountsSuccessesAndFailures(t *testing.T) {
	det := new(lb.Detector) // no ejection config: failures only count
	p := newTestPicker(&fakeClock{t: nanotime()}, det, testEndpoint{addr: "a", cost: time.Millisecond})
	for i := range 13 {
		res, err := p.Pick(balancer.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			res.Done(failed)
		} else {
			res.Done(ok)
		}
	}
	res, _ := p.Pick(balancer.PickInfo{})
	res.Done(balancer.DoneInfo{}) // not sent: no call
	if got := callsOf(p.eps[0].e); got != 13 {
		t.Fatalf("calls = %d after 10 successes, 3 failures and an unsent pick, want 13", got)
	}
}
