package lb

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
)

// riseEvery is how often a locality picker recomputes its levels' shares
// while a smoothed healthy fraction rises toward its value (see smooth).
// Falls, and every change of what an endpoint admits, are taken at the
// next pick (Detector.Changes), not on this clock.
const riseEvery = int64(50 * time.Millisecond)

// levelOf returns how near an endpoint runs to the client at l: by its
// instance's region and zone; an endpoint without an instance is
// Elsewhere.
func levelOf(ep grpcresolver.Endpoint, l lbattr.Locality) registry.Nearness {
	in, ok := lbattr.InstanceOf(ep)
	if !ok {
		return registry.Elsewhere
	}
	return registry.Near(l.Region, l.Zone, in.Region, in.Zone)
}

// capacityWeight is what an endpoint of weight w counts for in its level's
// capacity: its weight, and DefaultWeight for a draining endpoint (weight
// 0; the registry keeps no weight for it), which counts as capacity lost.
func capacityWeight(w int) float64 {
	if w == 0 {
		return registry.DefaultWeight
	}
	return float64(w)
}

// levelCapacity is the capacity of one group's listed endpoints, per
// level: total of all of them, READY or not, and fresh of those not READY
// that count as healthy: connecting for the first time, not failed yet
// (so that a starting channel does not spill while its connections come
// up).
type levelCapacity struct {
	total, fresh [levels]float64
}

// healthTrack is the smoothed healthy fraction of each level of one group
// of endpoints (the base, or a color), kept by Base across the group's
// pickers.
type healthTrack struct {
	mu     sync.Mutex
	health [levels]float64
	at     int64 // Nanotime of the last update; 0 before the first
}

// member is a READY endpoint of a level, for its health.
type member struct {
	outlier *OutlierState
	weight  float64 // Ready.capacity
}

// levelView is what a localityPicker derived from its endpoints'
// admission (OutlierState.Admissible) at one count of the Detector's
// changes: each level's share of the calls, from the weight of its open
// endpoints, and when its next probe is due (now or later). It is
// replaced, never modified.
type levelView struct {
	changes uint64
	shares  [levels]float64
	probeAt [levels]int64 // earliest end of an ejection whose probe is not out; math.MaxInt64: none
	wake    int64         // recompute at this time even without a change (a probe falls due, a rise goes on)
}

// localityPicker sends each call to one level's policy picker, drawn by
// the levels' shares (Spill), nearest first. A level whose probe is due
// gets the pick first; a level with no admissible endpoint passes the
// pick on to the next level in the same pick.
type localityPicker struct {
	pickers [levels]balancer.Picker // nil for a level without a READY endpoint
	members [levels][]member
	cap     levelCapacity
	factor  float64
	track   *healthTrack
	det     *Detector

	view atomic.Pointer[levelView]
}

// newLocalityPicker returns the picker over ready (one group, non-empty)
// split by level, each level's picker made by newPicker; lc is the
// capacity of the group's listed endpoints per level.
func newLocalityPicker[T any](ready []Ready[T], lc levelCapacity, cfg LocalityConfig, track *healthTrack, det *Detector,
	newPicker func([]Ready[T]) balancer.Picker) balancer.Picker {
	var split [levels][]Ready[T]
	for _, r := range ready {
		split[r.level] = append(split[r.level], r)
	}
	p := &localityPicker{cap: lc, factor: cfg.OverprovisioningFactor, track: track, det: det}
	for lv, rs := range split {
		if len(rs) == 0 {
			continue
		}
		p.pickers[lv] = newPicker(rs)
		for i := range rs {
			p.members[lv] = append(p.members[lv], member{outlier: &rs[i].Endpoint.Outlier, weight: rs[i].capacity})
		}
	}
	p.refresh(Nanotime(), true)
	return p
}

// Pick implements balancer.Picker: a level whose probe is due takes the
// pick first; otherwise it draws a level by the shares. A level whose
// picker has no admissible endpoint passes the pick on to the next level
// (farther, then back to the nearest). It returns ErrNoAdmissible when no
// level has one. It does not block, and allocates nothing.
func (p *localityPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	now := Nanotime()
	v := p.view.Load()
	if v.changes != p.det.Changes() || now >= v.wake {
		p.refresh(now, false)
		v = p.view.Load()
	}
	for lv := range levels {
		if now >= v.probeAt[lv] && p.pickers[lv] != nil {
			if res, err := p.pickers[lv].Pick(info); err != ErrNoAdmissible {
				return res, err
			}
		}
	}
	r := rand.Float64()
	drawn := levels - 1
	for lv := range levels {
		if r < v.shares[lv] {
			drawn = lv
			break
		}
		r -= v.shares[lv]
	}
	for k := range levels {
		lv := (drawn + k) % levels
		if p.pickers[lv] == nil {
			continue
		}
		if res, err := p.pickers[lv].Pick(info); err != ErrNoAdmissible {
			return res, err
		}
	}
	return balancer.PickResult{}, ErrNoAdmissible
}

// refresh recomputes the view at now. Unless wait, it does nothing when
// another pick is refreshing (that pick's view comes next; the pass-on
// keeps picks right meanwhile).
func (p *localityPicker) refresh(now int64, wait bool) {
	t := p.track
	if wait {
		t.mu.Lock()
	} else if !t.mu.TryLock() {
		return
	}
	defer t.mu.Unlock()
	changes := p.det.Changes() // before reading the states: a change after it is seen next time
	if old := p.view.Load(); !wait && old != nil && old.changes == changes && now < old.wake {
		return // refreshed meanwhile
	}
	v := &levelView{changes: changes, wake: math.MaxInt64}
	var raw [levels]float64
	for lv := range levels {
		v.probeAt[lv] = math.MaxInt64
		if p.cap.total[lv] <= 0 {
			continue
		}
		healthy := p.cap.fresh[lv]
		for _, m := range p.members[lv] {
			// Only an open endpoint counts: one whose ejection time is
			// over admits its probe alone, which probeAt sends.
			if open, _ := m.outlier.Admissible(now); open {
				healthy += m.weight
			} else if u := m.outlier.until.Load(); u != 0 && !m.outlier.probe.Load() {
				v.probeAt[lv] = min(v.probeAt[lv], u)
			}
		}
		raw[lv] = min(1, healthy/p.cap.total[lv])
		if v.probeAt[lv] > now {
			v.wake = min(v.wake, v.probeAt[lv])
		}
	}
	rising := false
	if t.at == 0 {
		t.health = raw
	} else {
		for lv := range levels {
			t.health[lv] = smooth(t.health[lv], raw[lv], now-t.at)
			rising = rising || t.health[lv] < raw[lv]
		}
	}
	t.at = max(now, 1)
	if rising {
		v.wake = min(v.wake, now+riseEvery)
	}
	sh, ok := Spill(t.health, p.factor)
	if !ok {
		// Nothing healthy: the nearest level with a READY endpoint
		// takes the calls its admission allows, and passes the rest on.
		for lv := range levels {
			if p.pickers[lv] != nil {
				sh[lv] = 1
				break
			}
		}
	}
	v.shares = sh
	p.view.Store(v)
}
