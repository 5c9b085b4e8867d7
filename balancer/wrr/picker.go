package wrr

import (
	"math/bits"
	"sync/atomic"

	"google.golang.org/grpc/balancer"

	"github.com/musterhq/muster/balancer/internal/lb"
)

// maxRedraw bounds how many other turns of the sequence a pick whose turn
// falls on an ejected endpoint tries before it takes the next admitted
// endpoint in address order.
const maxRedraw = 16

// picker walks a precomputed smooth weighted round robin sequence.
type picker struct {
	eps  []entry
	seq  []uint32 // indices into eps, one period
	n    uint32   // len(seq)
	m    uint64   // ⌈2⁶⁴ / n⌉, for mod
	next atomic.Uint32
}

type entry struct {
	e      *lb.Endpoint[callbacks]
	picker balancer.Picker // the endpoint's pick_first picker
}

// newPicker is called by lb.Base with its lock held.
func newPicker(ready []lb.Ready[callbacks]) balancer.Picker {
	weights := make([]int, len(ready))
	p := &picker{eps: make([]entry, len(ready))}
	for i, r := range ready {
		weights[i] = r.Weight
		p.eps[i] = entry{e: r.Endpoint, picker: r.Picker}
	}
	p.seq = sequence(weights)
	p.n = uint32(len(p.seq))
	p.m = ^uint64(0)/uint64(p.n) + 1
	p.next.Store(randUint32())
	return p
}

// Pick implements balancer.Picker. It does not block, lock or allocate.
func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	i := p.next.Add(1)
	e := &p.eps[p.seq[p.mod(i)]]
	probe := false
	if e.e.Outlier.Ejected() {
		if e, probe = p.skip(i, nanotime()); e == nil {
			return balancer.PickResult{}, lb.ErrNoAdmissible
		}
	}
	res, err := e.picker.Pick(info)
	if err != nil {
		if probe {
			e.e.Outlier.ReleaseProbe()
		}
		return res, err
	}
	done := e.e.Stats.done
	if probe {
		done = e.e.Stats.probeDone
	}
	lb.ChainDone(&res, done)
	return res, nil
}

// skip finds the endpoint for turn i when its own is ejected, or may take
// its probe. An endpoint whose ejection ended takes its probe; otherwise
// the pick goes to the endpoint of another turn of the sequence, drawn by
// hashing i, so that the ejected endpoint's share is spread over the
// others in proportion to their weights. After maxRedraw ejected draws it
// takes the next admitted endpoint in address order, and when none is
// admitted returns nil (the pick passes on: see lb.ErrNoAdmissible).
func (p *picker) skip(i uint32, now int64) (*entry, bool) {
	own := int(p.seq[p.mod(i)])
	if ok, probe := p.eps[own].e.Outlier.Admit(now); ok {
		return &p.eps[own], probe
	}
	for k := uint32(1); k <= maxRedraw; k++ {
		e := &p.eps[p.seq[p.mod(mix(i+k*0x9e3779b9))]]
		if ok, probe := e.e.Outlier.Admit(now); ok {
			return e, probe
		}
	}
	for k := 1; k < len(p.eps); k++ {
		e := &p.eps[(own+k)%len(p.eps)]
		if ok, probe := e.e.Outlier.Admit(now); ok {
			return e, probe
		}
	}
	return nil, false
}

// mod returns i % p.n without a division (Lemire's fastmod: exact for
// every 32-bit i and n).
func (p *picker) mod(i uint32) uint32 {
	hi, _ := bits.Mul64(p.m*uint64(i), uint64(p.n))
	return uint32(hi)
}

// mix is a 32-bit integer hash (the finalizer of MurmurHash3).
func mix(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	x *= 0xc2b2ae35
	x ^= x >> 16
	return x
}
