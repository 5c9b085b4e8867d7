package fleet_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// absent is the weight of an instance a view does not hold.
const absent = -1

// view is what one channel or stream holds of its service: weight by
// address, 0 for a drained instance. update turns each new list into the
// differences from the last one.
type view struct {
	expect int // instances the first full list has
	ready  bool
	last   map[string]int
}

// diff is one instance whose weight changed in a view (absent: it left).
type diff struct {
	addr string
	w    int
}

// update takes the view's new list and returns what changed; ready is
// true the first time the list has the expected size, and diffs are
// reported only from then on.
func (v *view) update(now map[string]int) (diffs []diff, ready bool) {
	if v.ready {
		for a, w := range now {
			if old, ok := v.last[a]; !ok || old != w {
				diffs = append(diffs, diff{a, w})
			}
		}
		for a := range v.last {
			if _, ok := now[a]; !ok {
				diffs = append(diffs, diff{a, absent})
			}
		}
	} else if len(now) >= v.expect {
		v.ready, ready = true, true
	}
	v.last = now
	return diffs, ready
}

// diffLine is how a child reports a diff seen by observer obs at at.
func diffLine(obs string, d diff, at time.Time) string {
	return fmt.Sprintf("d %s %s %d %d", obs, d.addr, d.w, at.UnixNano())
}

// parseDiffLine reads a diffLine.
func parseDiffLine(line string) (obs string, d diff, at time.Time, err error) {
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "d" {
		return "", diff{}, time.Time{}, fmt.Errorf("not a diff line: %q", line)
	}
	w, err1 := strconv.Atoi(f[3])
	ns, err2 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil {
		return "", diff{}, time.Time{}, fmt.Errorf("bad diff line: %q", line)
	}
	return f[1], diff{f[2], w}, time.Unix(0, ns), nil
}

// The kinds of change the churn makes, in the order it makes them to one
// instance.
const (
	kindRegister = iota
	kindWeight
	kindDrain
	kindDeregister
	kinds
)

var kindNames = [kinds]string{"register", "weight", "drain", "deregister"}

// change is one change the churn made to an instance (addr) of a service:
// what a view shows once it has it (want: the weight, 0 drained, absent).
type change struct {
	kind    int
	region  int
	service string
	addr    string
	want    int
	at      time.Time // when the change was asked for
}

// matches reports whether a view's new weight for the change's address
// shows the change.
func (c *change) matches(w int) bool {
	if c.kind == kindRegister {
		return w != absent
	}
	return w == c.want
}

// observer is one channel or stream: its tier ("muster", "etcd-naming",
// "ads"), the service it follows, and the region it follows (anyRegion:
// all of them).
type observer struct {
	tier, service string
	region        int
}

// anyRegion is the region of an observer that follows every region.
const anyRegion = -1

// matcher pairs the churn's changes with what each observer saw: the time
// from each change to each observer of its service.
type matcher struct {
	mu        sync.Mutex
	observers map[string]observer
	byService map[string][]string // observer IDs following each service
	// pending holds, per observer and address, the changes it has not
	// shown yet, in the order they were made.
	pending map[string]map[string][]*change
	lat     map[string]*[kinds][]time.Duration // by tier
	skipped map[string]int                     // by tier: tiers that cannot show a kind
}

func newMatcher() *matcher {
	return &matcher{
		observers: map[string]observer{}, byService: map[string][]string{},
		pending: map[string]map[string][]*change{}, lat: map[string]*[kinds][]time.Duration{},
		skipped: map[string]int{},
	}
}

// observe adds observer id.
func (m *matcher) observe(id string, o observer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observers[id] = o
	m.byService[o.service] = append(m.byService[o.service], id)
	m.pending[id] = map[string][]*change{}
	if m.lat[o.tier] == nil {
		m.lat[o.tier] = new([kinds][]time.Duration)
	}
}

// made records a change, before it is made, for every observer of its
// service and region that can show it (etcd's naming layout has no
// weights).
func (m *matcher) made(c *change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range m.byService[c.service] {
		o := m.observers[id]
		if o.region != anyRegion && o.region != c.region {
			continue
		}
		tier := o.tier
		if tier == tierNaming && (c.kind == kindWeight || c.kind == kindDrain) {
			m.skipped[tier]++
			continue
		}
		m.pending[id][c.addr] = append(m.pending[id][c.addr], c)
	}
}

// saw records that observer id's view showed d at at: the latest change
// of d's address it matches is done, and so is every earlier one (the view
// went past them).
func (m *matcher) saw(id string, d diff, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := m.pending[id][d.addr]
	last := -1
	for i, c := range cs {
		if c.matches(d.w) {
			last = i
		}
	}
	if last < 0 {
		return
	}
	lat := m.lat[m.observers[id].tier]
	for _, c := range cs[:last+1] {
		lat[c.kind] = append(lat[c.kind], at.Sub(c.at))
	}
	if last == len(cs)-1 {
		delete(m.pending[id], d.addr)
	} else {
		m.pending[id][d.addr] = cs[last+1:]
	}
}

// outstanding counts the changes not yet shown, by tier.
func (m *matcher) outstanding() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for id, byAddr := range m.pending {
		for _, cs := range byAddr {
			out[m.observers[id].tier] += len(cs)
		}
	}
	return out
}

// latencies returns the times from change to observer of tier, of the
// given kinds (all kinds when none is given).
func (m *matcher) latencies(tier string, ks ...int) []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	lat := m.lat[tier]
	if lat == nil {
		return nil
	}
	if len(ks) == 0 {
		ks = []int{kindRegister, kindWeight, kindDrain, kindDeregister}
	}
	var out []time.Duration
	for _, k := range ks {
		out = append(out, lat[k]...)
	}
	slices.Sort(out)
	return out
}

// quantile returns the q-quantile of sorted, 0 when it is empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}
