package watchhub

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/musterhq/muster/registry"
)

// Services is a Discovery's set of followed services, by key: each one
// started on its first watcher with a Hub of its own, shared by every
// watcher of the key, and stopped when its last watcher closes (at once,
// or after a linger time if no watcher came back), or by Close. S is the
// backend's per-service state (its goroutine, informer, cache); the
// backend says how to start one (Watch) and how to stop one
// (NewServices). A Services is safe for concurrent use.
type Services[S any] struct {
	stop   func(S)
	linger time.Duration

	// beforeRelease, when not nil, is called before release takes the
	// lock (set by tests to add a watcher in between).
	beforeRelease func()

	mu       sync.Mutex
	services map[string]*followed[S]
	closed   bool
	// stopping counts the stops begun by a release and not yet done,
	// which Close waits for: a service taken out of the map before Close
	// is still stopping.
	stopping sync.WaitGroup
}

// followed is one service of a Services: the backend's state and its hub.
type followed[S any] struct {
	key    string
	svc    S
	hub    *Hub
	linger *lingering // the pending stop after the last watcher left; guarded by Services.mu
}

// lingering is a pending stop of a service whose last watcher left.
type lingering struct {
	timer *time.Timer
}

// NewServices returns an empty set of services. stop ends a service's
// goroutines and waits for them; it is called outside the lock, once per
// service started. A positive linger keeps a service whose last watcher
// closed for that long before stopping it; otherwise it stops at once.
func NewServices[S any](stop func(S), linger time.Duration) *Services[S] {
	return &Services[S]{stop: stop, linger: linger, services: map[string]*followed[S]{}}
}

// Watch adds a watcher of the service key, whose snapshots carry name as
// their Service. When key is not followed yet, start is called (under
// the lock, so it must not block) with the service's new hub, which the
// service publishes to; it starts following key and returns the
// service's state. Watch fails with ctx's error when ctx has ended, and
// with registry.ErrClosed after Close.
func (ss *Services[S]) Watch(ctx context.Context, key, name string, start func(*Hub) S) (registry.Watcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, registry.ErrClosed
	}
	f := ss.services[key]
	if f == nil {
		f = &followed[S]{key: key}
		f.hub = New(key, func() { ss.release(f) })
		f.svc = start(f.hub)
		ss.services[key] = f
	}
	f.stopLinger()
	return f.hub.Watch(ctx, name), nil
}

// Get returns the service followed under key, if any.
func (ss *Services[S]) Get(key string) (S, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if f := ss.services[key]; f != nil {
		return f.svc, true
	}
	var zero S
	return zero, false
}

// Each calls f for every service followed, under the lock (so f must not
// block nor call the Services), in no particular order.
func (ss *Services[S]) Each(f func(S)) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, e := range ss.services {
		f(e.svc)
	}
}

// Counts returns the number of services followed and of their open
// watchers.
func (ss *Services[S]) Counts() (services, watchers int) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, f := range ss.services {
		watchers += f.hub.Watchers()
	}
	return len(ss.services), watchers
}

// Stats returns what the services say of a Discovery: their number, their
// open watchers, and each one's snapshot size, watchers, staleness and
// load, sorted by key. The backend adds its counters (SkippedValues,
// Loads, Resyncs).
func (ss *Services[S]) Stats() registry.DiscoveryStats {
	ss.mu.Lock()
	var st registry.DiscoveryStats
	for key, f := range ss.services {
		snap, watchers := f.hub.Snapshot(), f.hub.Watchers()
		st.Watchers += watchers
		st.PerService = append(st.PerService, registry.ServiceStats{
			Name: key, Instances: len(snap.Instances), Watchers: watchers, StaleSince: snap.StaleSince, Loaded: snap.Loaded, Err: snap.Err,
		})
	}
	ss.mu.Unlock()
	st.Services = len(st.PerService)
	slices.SortFunc(st.PerService, func(a, b registry.ServiceStats) int { return strings.Compare(a.Name, b.Name) })
	return st
}

// Close stops every service, then closes its watchers (without a
// release), and makes later Watch calls fail; it returns once every
// service has stopped, those whose stop a last watcher's Close began
// just before too. It reports whether this call closed the set: later
// calls do nothing.
func (ss *Services[S]) Close() bool {
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return false
	}
	ss.closed = true
	services := ss.services
	ss.services = nil
	for _, f := range services {
		f.stopLinger()
	}
	ss.mu.Unlock()
	for _, f := range services {
		ss.stop(f.svc)
		f.hub.CloseAll()
	}
	ss.stopping.Wait()
	return true
}

// release is f's hub's idle callback: its last watcher closed. Unless a
// watcher was added since, or f is no longer the service of its key
// (released already, or Close), f stops, at once or after the linger
// time.
func (ss *Services[S]) release(f *followed[S]) {
	if ss.beforeRelease != nil {
		ss.beforeRelease()
	}
	if ss.linger <= 0 {
		ss.stopIdle(f, nil)
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.idle(f) {
		f.stopLinger()
		l := &lingering{}
		l.timer = time.AfterFunc(ss.linger, func() { ss.stopIdle(f, l) })
		f.linger = l
	}
}

// stopIdle stops f unless a watcher was added since or f is no longer
// the service of its key. Called at the end of the linger l (nil: at
// once), it also leaves f alone unless l is still f's pending stop: a
// timer that fired while a Watch cancelled it, replaced since, leaves the
// stop to the one replacing it.
func (ss *Services[S]) stopIdle(f *followed[S], l *lingering) {
	ss.mu.Lock()
	if !ss.idle(f) || (l != nil && f.linger != l) {
		ss.mu.Unlock()
		return
	}
	delete(ss.services, f.key)
	ss.stopping.Add(1) // under the lock Close sets closed with: before its Wait
	ss.mu.Unlock()
	defer ss.stopping.Done()
	ss.stop(f.svc)
}

// idle reports whether f is its key's service and has no watcher.
// ss.mu must be held.
func (ss *Services[S]) idle(f *followed[S]) bool {
	return ss.services[f.key] == f && f.hub.Watchers() == 0
}

// stopLinger cancels a pending linger stop. Services.mu must be held.
func (f *followed[S]) stopLinger() {
	if f.linger != nil {
		f.linger.timer.Stop()
		f.linger = nil
	}
}
