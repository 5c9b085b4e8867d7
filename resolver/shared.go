package resolver

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
)

// sharedStates lets the channels of a Builder that resolve the same target
// (service and filters) share the states they are sent: the first channel
// to serve a list chooses its instances (filters, subsetting) and builds
// its endpoints and addresses; every other channel serving the same list
// hands gRPC the same arrays. A change to a service of n instances watched
// by c channels then costs one list's endpoints, not c, and the channels
// keep no arrays of their own. Arrays are never written once built, so
// sharing them among channels (and keeping them in gRPC and balancers) is
// safe.
type sharedStates struct {
	mu      sync.Mutex
	targets map[string]*targetStates
}

// targetStates holds, for one target, the watcher and feed its channels
// share and the latest states built for it.
type targetStates struct {
	// chans are the channels resolving the target; guarded by
	// sharedStates.mu, replaced (never written) when one joins or leaves,
	// so that the feed takes it under the lock and walks it without.
	chans []*musterResolver
	feed  *feed

	mu sync.Mutex
	// recent are the states built last, newest first: two, so that
	// channels whose protection serves the previous list while others
	// serve the live one do not rebuild at each change.
	recent [2]*builtState
	spare  stateArrays
	// gone memoizes the last departures asked for (the deletion grace),
	// which every channel of the target asks for the same two lists.
	gone struct{ prev, live, out []*registry.Instance }
}

// builtState is the state made for one served list. It is never written
// once built.
type builtState struct {
	from  []*registry.Instance // the served list it was chosen from
	list  []*registry.Instance // the chosen instances, sorted by ID
	eps   []grpcresolver.Endpoint
	addrs []grpcresolver.Address
}

// join adds r to the channels of its target, starting the target's feed
// (one Discovery watcher) with the first one, and sets r's target and
// watcher.
func (s *sharedStates) join(b *Builder, r *musterResolver) error {
	key := r.q.key()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.targets == nil {
		s.targets = map[string]*targetStates{}
	}
	t := s.targets[key]
	if t == nil {
		t = &targetStates{}
		f, err := startFeed(b, s, t, r.q.service)
		if err != nil {
			return err
		}
		t.feed = f
		s.targets[key] = t
	}
	// Set before the feed can see r (it reads chans under s.mu).
	r.states, r.w = t, t.feed.w
	t.chans = append(slices.Clip(t.chans), r)
	return nil
}

// leave removes r from the channels of its target; the last one stops the
// target's feed and closes its watcher.
func (s *sharedStates) leave(r *musterResolver) {
	key := r.q.key()
	s.mu.Lock()
	t := s.targets[key]
	if t == nil || t != r.states {
		s.mu.Unlock()
		return
	}
	t.chans = slices.DeleteFunc(slices.Clone(t.chans), func(c *musterResolver) bool { return c == r })
	last := len(t.chans) == 0
	if last {
		delete(s.targets, key)
	}
	s.mu.Unlock()
	if last {
		t.feed.stop()
	}
}

// channels returns the target's channels, a slice never written.
func (s *sharedStates) channels(t *targetStates) []*musterResolver {
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.chans
}

// state returns the state for the served list from: a recent one built
// from the same list, else a new one of the instances choose picks from it.
// An unchanged choice keeps the previous state's list and arrays, so that
// a channel recognises it by identity (sameList); otherwise the
// endpoints of instances unchanged since the previous state are reused,
// and only those of changed instances are made.
func (t *targetStates) state(from []*registry.Instance, choose func([]*registry.Instance) []*registry.Instance) *builtState {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, st := range t.recent {
		if st != nil && sameList(st.from, from) {
			return st
		}
	}
	list := choose(from)
	st := &builtState{from: from, list: list}
	prev := t.recent[0]
	if prev != nil && registry.EqualInstances(list, prev.list) {
		st.list, st.eps, st.addrs = prev.list, prev.eps, prev.addrs
	} else {
		st.eps, st.addrs = t.spare.take(len(list))
		var prevList []*registry.Instance
		var prevEPs []grpcresolver.Endpoint
		if prev != nil {
			prevList, prevEPs = prev.list, prev.eps
		}
		reuseEndpoints(st.eps, st.addrs, list, prevList, prevEPs)
	}
	t.recent[1], t.recent[0] = prev, st
	return st
}

// departures returns the instances of prev missing from live (departed),
// computed once for the target's channels, which go from the same list to
// the same next one.
func (t *targetStates) departures(prev, live []*registry.Instance) []*registry.Instance {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := &t.gone; !sameList(g.prev, prev) || !sameList(g.live, live) {
		g.prev, g.live, g.out = prev, live, departed(prev, live)
	}
	return t.gone.out
}

// prepare allocates the arrays of the next state, after a state was
// handed to gRPC, unless they are ready.
func (t *targetStates) prepare() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.spare.eps != nil || t.recent[0] == nil {
		return
	}
	t.spare.prepare(len(t.recent[0].list))
}

// sameList reports whether a and b are the same slice of a snapshot (or
// both empty). Snapshots' lists are never written, so the same slice holds
// the same instances.
func sameList(a, b []*registry.Instance) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// key names the target: the channels of a Builder with equal keys are
// sent the same lists.
func (q query) key() string {
	parts := []string{q.service, q.version, q.region, q.zone}
	for _, k := range slices.Sorted(maps.Keys(q.metadata)) {
		parts = append(parts, k, q.metadata[k])
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.Quote(p)) // unambiguous, whatever the parts hold
	}
	return b.String()
}
