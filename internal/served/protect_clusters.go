package served

import (
	"time"

	"github.com/musterhq/muster/registry"
)

// protection is one follower's empty-list protection. A snapshot of one
// registry is judged whole, by one protector. A snapshot of several
// independent clusters (Snapshot.Clusters) is judged cluster by cluster,
// each part by a protector of its own: one cluster's mass expiry is
// withheld while the other clusters' changes are served, and another
// cluster's size neither masks a cluster's loss nor makes its normal
// shrink look like one. It is pure, like protector.
type protection struct {
	fraction float64
	window   time.Duration

	whole protector
	parts map[string]*protector // by cluster, for snapshots with Clusters

	// The last list served from withheld parts, and the parts it was
	// made of: the same parts give the same slice, so the target's
	// states recognise it (sameList).
	mergedFrom [][]*registry.Instance
	merged     []*registry.Instance
	// held names the clusters whose list the last decide withheld.
	held []string
}

func newProtection(fraction float64, window time.Duration) protection {
	return protection{fraction: fraction, window: window, whole: protector{fraction: fraction, window: window}}
}

// decide returns the list to serve for snap, a loaded snapshot, and
// whether protection withheld (part of) its list.
func (p *protection) decide(now time.Time, snap registry.Snapshot) ([]*registry.Instance, bool) {
	if snap.Clusters == nil {
		return p.whole.decide(now, snap.Instances)
	}
	if p.parts == nil {
		p.parts = make(map[string]*protector, len(snap.Clusters))
	}
	served := make([][]*registry.Instance, len(snap.Clusters))
	withheld := false
	p.held = p.held[:0]
	for i, c := range snap.Clusters {
		pr := p.parts[c.Cluster]
		if pr == nil {
			pr = &protector{fraction: p.fraction, window: p.window}
			p.parts[c.Cluster] = pr
		}
		if !c.Loaded {
			continue // nothing known of it yet: nothing to judge
		}
		list, w := pr.decide(now, c.Instances)
		served[i] = list
		if w {
			withheld = true
			p.held = append(p.held, c.Cluster)
		}
	}
	if !withheld {
		p.mergedFrom, p.merged = nil, nil
		return snap.Instances, false
	}
	if !sameParts(p.mergedFrom, served) {
		p.mergedFrom, p.merged = served, registry.MergeSorted(served...)
	}
	return p.merged, true
}

func sameParts(a, b [][]*registry.Instance) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameList(a[i], b[i]) {
			return false
		}
	}
	return true
}

// each calls f with every protector in use.
func (p *protection) each(f func(*protector)) {
	if p.parts == nil {
		f(&p.whole)
		return
	}
	for _, pr := range p.parts {
		f(pr)
	}
}

// since returns when the oldest protection in progress started, or the
// zero time while every list is served.
func (p *protection) since() time.Time {
	var t time.Time
	p.each(func(pr *protector) {
		if s := pr.since(); !s.IsZero() && (t.IsZero() || s.Before(t)) {
			t = s
		}
	})
	return t
}

// kept returns the number of instances of the lists last accepted.
func (p *protection) kept() int {
	n := 0
	p.each(func(pr *protector) { n += len(pr.good) })
	return n
}

// next returns the earliest time at which a decide with no new snapshot
// would serve a list now withheld; ok is false while nothing is withheld.
func (p *protection) next() (at time.Time, ok bool) {
	p.each(func(pr *protector) {
		if t, o := pr.next(); o && (!ok || t.Before(at)) {
			at, ok = t, true
		}
	})
	return at, ok
}
