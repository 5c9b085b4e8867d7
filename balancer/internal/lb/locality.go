package lb

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
)

// refreshEvery is how often a locality picker recomputes its levels'
// health (ejections change it between pickers); picks in between use the
// shares of the last computation.
const refreshEvery = int64(50 * time.Millisecond)

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
	weight  float64
}

// localityPicker sends each call to one level's policy picker, drawn by
// the levels' shares (Spill), nearest first.
type localityPicker struct {
	pickers [levels]balancer.Picker // nil for a level without a READY endpoint
	members [levels][]member
	cap     levelCapacity
	factor  float64
	track   *healthTrack

	shares atomic.Pointer[[levels]float64]
	next   atomic.Int64 // Nanotime of the next refresh
}

// newLocalityPicker returns the picker over ready (one group, non-empty)
// split by level, each level's picker made by newPicker; lc is the
// capacity of the group's listed endpoints per level.
func newLocalityPicker[T any](ready []Ready[T], lc levelCapacity, cfg LocalityConfig, track *healthTrack,
	newPicker func([]Ready[T]) balancer.Picker) balancer.Picker {
	var split [levels][]Ready[T]
	for _, r := range ready {
		split[r.level] = append(split[r.level], r)
	}
	p := &localityPicker{cap: lc, factor: cfg.OverprovisioningFactor, track: track}
	for lv, rs := range split {
		if len(rs) == 0 {
			continue
		}
		p.pickers[lv] = newPicker(rs)
		for i := range rs {
			p.members[lv] = append(p.members[lv], member{outlier: &rs[i].Endpoint.Outlier, weight: capacityWeight(rs[i].Weight)})
		}
	}
	p.refresh(Nanotime(), true)
	return p
}

// Pick implements balancer.Picker: it draws a level by the shares and
// picks with its picker. It does not block, and allocates nothing.
func (p *localityPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	now := Nanotime()
	if now >= p.next.Load() {
		p.refresh(now, false)
	}
	sh := p.shares.Load()
	r := rand.Float64()
	for lv := range levels {
		if r < sh[lv] && p.pickers[lv] != nil {
			return p.pickers[lv].Pick(info)
		}
		r -= sh[lv]
	}
	for lv := range levels { // rounding: the nearest level with a picker
		if p.pickers[lv] != nil {
			return p.pickers[lv].Pick(info)
		}
	}
	panic("lb: locality picker without a READY endpoint") // newLocalityPicker gets a non-empty group
}

// refresh recomputes the levels' health and shares at now. Unless wait,
// it does nothing when another pick is refreshing.
func (p *localityPicker) refresh(now int64, wait bool) {
	t := p.track
	if wait {
		t.mu.Lock()
	} else if !t.mu.TryLock() {
		return
	}
	defer t.mu.Unlock()
	if !wait && now < p.next.Load() {
		return // refreshed meanwhile
	}
	var raw [levels]float64
	for lv := range levels {
		if p.cap.total[lv] <= 0 {
			continue
		}
		healthy := p.cap.fresh[lv]
		for _, m := range p.members[lv] {
			// An endpoint whose ejection time is over counts as
			// healthy, so that its level gets the calls that probe it.
			if u := m.outlier.until.Load(); u == 0 || u <= now {
				healthy += m.weight
			}
		}
		raw[lv] = min(1, healthy/p.cap.total[lv])
	}
	if t.at == 0 {
		t.health = raw
	} else {
		for lv := range levels {
			t.health[lv] = smooth(t.health[lv], raw[lv], now-t.at)
		}
	}
	t.at = max(now, 1)
	sh, ok := Spill(t.health, p.factor)
	if !ok {
		// Nothing healthy: the nearest level with a READY endpoint
		// takes every call, as without locality.
		for lv := range levels {
			if p.pickers[lv] != nil {
				sh[lv] = 1
				break
			}
		}
	}
	p.shares.Store(&sh)
	p.next.Store(now + refreshEvery)
}
