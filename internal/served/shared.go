package served

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/musterhq/muster/registry"
)

// sharedStates lets the followers of a Pipeline that serve the same target
// (service and filters) share their watcher, their feed and the lists they
// are handed: the first follower to serve a list chooses its instances
// (filters, subsetting) and has them built (Config.Build); every other
// follower serving the same list is handed the same Chosen. A change to a
// service of n instances followed by c consumers then costs one list's
// choice and build, not c.
type sharedStates struct {
	mu      sync.Mutex
	targets map[string]*targetStates
}

// targetStates holds, for one target, the watcher and feed its followers
// share and the latest lists chosen for it.
type targetStates struct {
	// chans are the target's followers; guarded by sharedStates.mu,
	// replaced (never written) when one joins or leaves, so that the feed
	// takes it under the lock and walks it without.
	chans []*Follower
	feed  *feed

	mu sync.Mutex
	// recent are the lists chosen last, newest first: two, so that
	// followers whose protection serves the previous list while others
	// serve the live one do not choose again at each change.
	recent [2]*Chosen
	// gone memoizes the last departures asked for (the deletion grace),
	// which every follower of the target asks for the same two lists.
	gone struct{ prev, live, out []*registry.Instance }
}

// join adds f to the followers of its target, starting the target's feed
// (one Discovery watcher) with the first one, and sets f's states and
// watcher.
func (s *sharedStates) join(p *Pipeline, f *Follower) error {
	key := f.t.key()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.targets == nil {
		s.targets = map[string]*targetStates{}
	}
	t := s.targets[key]
	if t == nil {
		t = &targetStates{}
		fd, err := startFeed(p, s, t, f.t.Service)
		if err != nil {
			return err
		}
		t.feed = fd
		s.targets[key] = t
	}
	// Set before the feed can see f (it reads chans under s.mu).
	f.states, f.w = t, t.feed.w
	t.chans = append(slices.Clip(t.chans), f)
	return nil
}

// leave removes f from the followers of its target; the last one stops the
// target's feed and closes its watcher.
func (s *sharedStates) leave(f *Follower) {
	key := f.t.key()
	s.mu.Lock()
	t := s.targets[key]
	if t == nil || t != f.states {
		s.mu.Unlock()
		return
	}
	t.chans = slices.DeleteFunc(slices.Clone(t.chans), func(c *Follower) bool { return c == f })
	last := len(t.chans) == 0
	if last {
		delete(s.targets, key)
	}
	s.mu.Unlock()
	if last {
		t.feed.stop()
	}
}

// channels returns the target's followers, a slice never written.
func (s *sharedStates) channels(t *targetStates) []*Follower {
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.chans
}

// state returns the Chosen for the served list from: a recent one chosen
// from the same list, else a new one of the instances choose picks from
// it, built by build (nil: none). An unchanged choice keeps the previous
// Chosen's instances and build, so that a follower recognises it by
// identity (sameList).
func (t *targetStates) state(from []*registry.Instance, choose func([]*registry.Instance) []*registry.Instance,
	build func([]*registry.Instance, *Chosen) any) *Chosen {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.recent {
		if c != nil && sameList(c.From, from) {
			return c
		}
	}
	list := choose(from)
	c := &Chosen{From: from, Instances: list}
	prev := t.recent[0]
	switch {
	case prev != nil && registry.EqualInstances(list, prev.Instances):
		c.Instances, c.Built = prev.Instances, prev.Built
	case build != nil:
		c.Built = build(list, prev)
	}
	t.recent[1], t.recent[0] = prev, c
	return c
}

// departures returns the instances of prev missing from live (departed),
// computed once for the target's followers, which go from the same list to
// the same next one.
func (t *targetStates) departures(prev, live []*registry.Instance) []*registry.Instance {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := &t.gone; !sameList(g.prev, prev) || !sameList(g.live, live) {
		g.prev, g.live, g.out = prev, live, departed(prev, live)
	}
	return t.gone.out
}

// sameList reports whether a and b are the same slice of a snapshot (or
// both empty). Snapshots' lists are never written, so the same slice holds
// the same instances.
func sameList(a, b []*registry.Instance) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// key names the target: the followers of a Pipeline with equal keys are
// handed the same lists.
func (q Target) key() string {
	parts := []string{q.Service, q.Version, q.Region, q.Zone}
	for _, k := range slices.Sorted(maps.Keys(q.Metadata)) {
		parts = append(parts, k, q.Metadata[k])
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.Quote(p)) // unambiguous, whatever the parts hold
	}
	return b.String()
}
