package p2c

import (
	"sync"

	"google.golang.org/grpc/balancer"

	"github.com/musterhq/muster/balancer/internal/lb"
)

// picker is immutable; the state it reads and writes lives in the
// balancer's endpoints.
type picker struct {
	eps   []entry
	decay decay
	det   *lb.Detector
}

type entry struct {
	e      *lb.Endpoint[load]
	picker balancer.Picker // the endpoint's pick_first picker
	weight float64
}

// call is one picked call, from Pick to Done. Records are recycled, so a
// pick allocates nothing; each carries its Done callback, bound once.
type call struct {
	e     *lb.Endpoint[load]
	p     *picker
	start int64
	probe bool
	done  func(balancer.DoneInfo)
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
func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	now := nanotime()
	e, probe := p.choose(now)
	res, err := e.picker.Pick(info)
	if err != nil {
		if probe {
			e.e.Outlier.ReleaseProbe()
		}
		return res, err
	}
	e.e.Stats.inFlight.Add(1)
	c := calls.Get().(*call)
	c.e, c.p, c.start, c.probe = e.e, p, now, probe
	if res.Done == nil {
		res.Done = c.done
	} else { // not with pick_first children; kept correct anyway
		ours, theirs := c.done, res.Done
		res.Done = func(di balancer.DoneInfo) { ours(di); theirs(di) }
	}
	return res, nil
}

// choose draws two distinct endpoints and returns the admitted one with the
// lower score; an endpoint whose ejection ended takes its probe first.
func (p *picker) choose(now int64) (e *entry, probe bool) {
	n := len(p.eps)
	if n == 1 {
		e = &p.eps[0]
		_, probe = e.e.Outlier.Admit(now) // a lone endpoint is never ejected
		return e, probe
	}
	r := randUint64()
	i := int(uint64(uint32(r>>32)) * uint64(n) >> 32)
	j := int(uint64(uint32(r)) * uint64(n-1) >> 32)
	if j >= i {
		j++
	}
	a, b := &p.eps[i], &p.eps[j]
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

// scan returns the first admitted endpoint after i, or i's when none is
// (the share cap keeps that from happening, save for probes in flight).
func (p *picker) scan(i int, now int64) (*entry, bool) {
	n := len(p.eps)
	for k := 1; k < n; k++ {
		e := &p.eps[(i+k)%n]
		if ok, probe := e.e.Outlier.Admit(now); ok {
			return e, probe
		}
	}
	return &p.eps[i], false
}

// finish is a call's Done callback.
func (c *call) finish(info balancer.DoneInfo) {
	e, p, start, probe := c.e, c.p, c.start, c.probe
	c.e, c.p = nil, nil
	calls.Put(c)
	e.Stats.inFlight.Add(-1)
	out := lb.Classify(info)
	if out == lb.NotSent {
		if probe {
			e.Outlier.ReleaseProbe()
		}
		return
	}
	now := nanotime()
	e.Stats.observe(now-start, now, out, &p.decay)
	if out == lb.Canceled {
		if probe {
			e.Outlier.ReleaseProbe() // nothing learnt: probe again
		}
		return
	}
	p.det.Record(&e.Outlier, out == lb.Failure, probe, now)
}
