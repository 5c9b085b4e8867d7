// Package watchhub holds one service's latest registry.Snapshot and the
// watchers that follow it: the part every Discovery backend shares. The
// goroutine that follows the backend publishes with Update; watchers are
// woken through coalescing channels, so a slow watcher never blocks it,
// and read the latest snapshot. A Hub is safe for concurrent use.
package watchhub

import (
	"context"
	"sync"

	"github.com/musterhq/muster/registry"
)

var _ registry.Watcher = (*Watcher)(nil)

// Hub is one service's snapshot and its watchers.
type Hub struct {
	idle func()

	mu       sync.Mutex
	snap     registry.Snapshot
	watchers map[*Watcher]struct{}
}

// New returns a hub for service, whose snapshot is not loaded yet. idle,
// if not nil, is called (outside the hub's lock, from the closing
// watcher's goroutine) each time a watcher's Close leaves the hub with
// none; the backend stops following the service there, after checking
// under its own lock that no watcher was added meanwhile (Watchers).
func New(service string, idle func()) *Hub {
	return &Hub{idle: idle, snap: registry.Snapshot{Service: service}, watchers: map[*Watcher]struct{}{}}
}

// Watch adds a watcher whose snapshots carry name as their Service (the
// name it was asked for, when a backend has several for one service). It
// is woken at once when the snapshot is already loaded or stale. The
// watcher is closed when ctx ends.
func (h *Hub) Watch(ctx context.Context, name string) *Watcher {
	w := &Watcher{h: h, name: name, ch: make(chan struct{}, 1)}
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	if h.snap.Loaded || h.snap.Stale() {
		w.ch <- struct{}{}
	}
	h.mu.Unlock()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _ = w.Close() })
		h.mu.Lock()
		closed := w.closed
		if !closed {
			w.stopAfter = stop
		}
		h.mu.Unlock()
		if closed {
			stop()
		}
	}
	return w
}

// Snapshot returns the current snapshot.
func (h *Hub) Snapshot() registry.Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snap
}

// Update calls f with the snapshot under the hub's lock, so f must not
// block; when f returns true, every watcher is woken.
func (h *Hub) Update(f func(*registry.Snapshot) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !f(&h.snap) {
		return
	}
	for w := range h.watchers {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// Watchers returns the number of open watchers.
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watchers)
}

// CloseAll closes every watcher, without calling idle.
func (h *Hub) CloseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		w.closed = true
		close(w.ch)
		if w.stopAfter != nil {
			w.stopAfter()
		}
	}
	clear(h.watchers)
}

// Watcher is one consumer of a hub's snapshots; it implements
// registry.Watcher.
type Watcher struct {
	h         *Hub
	name      string
	ch        chan struct{}
	stopAfter func() bool // guarded by h.mu
	closed    bool        // guarded by h.mu
}

// Updates implements registry.Watcher.
func (w *Watcher) Updates() <-chan struct{} { return w.ch }

// Snapshot implements registry.Watcher.
func (w *Watcher) Snapshot() registry.Snapshot {
	s := w.h.Snapshot()
	s.Service = w.name
	return s
}

// Close implements registry.Watcher. It is idempotent.
func (w *Watcher) Close() error {
	h := w.h
	h.mu.Lock()
	if w.closed {
		h.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.ch)
	delete(h.watchers, w)
	stop, last := w.stopAfter, len(h.watchers) == 0
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
	if last && h.idle != nil {
		h.idle()
	}
	return nil
}
