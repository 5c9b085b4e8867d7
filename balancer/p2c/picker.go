package p2c

import (
	"sync"

	"google.golang.org/grpc/balancer"

	"github.com/musterhq/muster/balancer/internal/lb"
)

// picker is immutable; the state it reads and writes lives in the
// balancer's endpoints and sampler.
type picker struct {
	eps     []entry
	decay   decay
	det     *lb.Detector
	sampler *sampler
}

type entry struct {
	e      *lb.Endpoint[load]
	picker balancer.Picker // the endpoint's pick_first picker
	weight float64
}

// call is one timed call (or probe), from Pick to Done. Records are
// recycled, so a pick allocates nothing; each carries its Done callback,
// bound once.
type call struct {
	e      *lb.Endpoint[load]
	p      *picker
	start  int64
	weight int64 // 1 / the chance the call had to be timed
	probe  bool
	done   func(balancer.DoneInfo)
}

// calls recycles call records. Its New is set in init (finish refers to
// calls).
var calls sync.Pool

func newCall() any {
	c := new(call)
	c.done = c.finish
	return c
}

// Pick implements balancer.Picker. It does not block, lock or allocate.
//
// An untimed pick (see sampler) costs one random number and a few atomic
// loads, and its Done callback nothing unless the call failed. A timed
// pick, a probe, and a pick of an endpoint without a cost yet also read
// the clock, add to the endpoint's in-flight count and take a call record,
// which their Done callback returns.
func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	r := randUint64()
	s := p.sampler
	mask := s.mask.Load()
	timed := uint32(r)&mask == 0 // low bits; the draws hang on each half's high bits
	var now int64
	if timed {
		now = nanotime()
	} else {
		now = s.coarse()
	}
	e, probe := p.choose(r, now)
	if e == nil {
		return balancer.PickResult{}, lb.ErrNoAdmissible
	}
	res, err := e.picker.Pick(info)
	if err != nil {
		if probe {
			e.e.Outlier.ReleaseProbe()
		}
		return res, err
	}
	l := &e.e.Stats
	cold := l.cost.Load() == 0
	var done func(balancer.DoneInfo)
	if !timed && !probe && !cold {
		done = l.done
	} else {
		// Timed by chance 1/(mask+1), or always: probes and cold
		// endpoints.
		w := int64(1)
		if !probe && !cold {
			w = int64(mask) + 1
		}
		if !timed {
			now = nanotime()
		}
		s.tick(now)
		l.inFlight.Add(w)
		c := calls.Get().(*call)
		c.e, c.p, c.start, c.weight, c.probe = e.e, p, now, w, probe
		done = c.done
	}
	lb.ChainDone(&res, done)
	return res, nil
}

// choose draws two distinct endpoints and returns the admitted one with the
// lower score; an endpoint whose ejection ended takes its probe first. It
// returns nil when no endpoint is admitted.
func (p *picker) choose(r uint64, now int64) (e *entry, probe bool) {
	n := len(p.eps)
	if n == 1 {
		e = &p.eps[0]
		if e.e.Outlier.Ejected() { // ejected while it had peers; it may be probed
			var ok bool
			if ok, probe = e.e.Outlier.Admit(nanotime()); !ok {
				return nil, false
			}
		}
		return e, probe
	}
	i := int(uint64(uint32(r>>32)) * uint64(n) >> 32)
	j := int(uint64(uint32(r)) * uint64(n-1) >> 32)
	if j >= i {
		j++
	}
	a, b := &p.eps[i], &p.eps[j]
	if a.e.Outlier.Ejected() || b.e.Outlier.Ejected() {
		now = nanotime() // ejections end on the real clock
	}
	aok, aprobe := a.e.Outlier.Admit(now)
	if aprobe {
		return a, true
	}
	bok, bprobe := b.e.Outlier.Admit(now)
	if bprobe {
		return b, true
	}
	switch {
	case aok && bok:
		if p.less(b, a, now) {
			return b, false
		}
		return a, false
	case aok:
		return a, false
	case bok:
		return b, false
	}
	return p.scan(i, now)
}

// less reports whether x's score is below y's: costs × (inFlight+1),
// divided by the weights.
func (p *picker) less(x, y *entry, now int64) bool {
	return x.e.Stats.score(now, &p.decay)*y.weight < y.e.Stats.score(now, &p.decay)*x.weight
}

// scan returns the first admitted endpoint after i, or nil when none is
// (then the pick passes on: see lb.ErrNoAdmissible).
func (p *picker) scan(i int, now int64) (*entry, bool) {
	n := len(p.eps)
	for k := 1; k < n; k++ {
		e := &p.eps[(i+k)%n]
		if ok, probe := e.e.Outlier.Admit(now); ok {
			return e, probe
		}
	}
	return nil, false
}

// finish is the Done callback of a timed call or a probe.
func (c *call) finish(info balancer.DoneInfo) {
	e, p, start, w, probe := c.e, c.p, c.start, c.weight, c.probe
	c.e, c.p = nil, nil
	calls.Put(c)
	l := &e.Stats
	l.inFlight.Add(-w)
	out := lb.Classify(info)
	if out == lb.NotSent {
		if probe {
			e.Outlier.ReleaseProbe()
		}
		return
	}
	now := nanotime()
	l.observe(now-start, now, out, &p.decay)
	switch out {
	case lb.Canceled:
		if probe {
			e.Outlier.ReleaseProbe() // nothing learnt: probe again
		}
		return
	case lb.Success:
		l.succeeded.Add(uint64(w))
	}
	p.det.Record(&e.Outlier, out == lb.Failure, probe, now)
}

// untimedDone is the Done callback of an untimed call to e, bound once
// per endpoint: it learns no latency, only a failure, which doubles the
// cost and counts toward ejection at once.
func untimedDone(e *lb.Endpoint[load], det *lb.Detector, info balancer.DoneInfo) {
	switch lb.Classify(info) {
	case lb.Success:
		det.Succeeded(&e.Outlier)
	case lb.Failure:
		now := nanotime()
		e.Stats.observe(0, now, lb.Failure, nil)
		det.Record(&e.Outlier, true, false, now)
	}
	// Not sent, canceled: nothing learnt.
}
