package kubernetes

import "github.com/musterhq/muster/registry"

// watcher is one consumer of a service's snapshots.
type watcher struct {
	s         *service
	name      string // the name given to Watch
	ch        chan struct{}
	stopAfter func() bool // guarded by s.mu
	closed    bool        // guarded by s.mu
}

// Updates implements registry.Watcher.
func (w *watcher) Updates() <-chan struct{} { return w.ch }

// Snapshot implements registry.Watcher. Its Service is the name given to
// Watch; its instances are named "name.namespace".
func (w *watcher) Snapshot() registry.Snapshot {
	w.s.mu.Lock()
	snap := w.s.snap
	w.s.mu.Unlock()
	snap.Service = w.name
	return snap
}

// Close implements registry.Watcher. It is idempotent.
func (w *watcher) Close() error {
	w.s.mu.Lock()
	stop := w.stopAfter
	w.s.mu.Unlock()
	if stop != nil {
		stop()
	}
	w.s.d.release(w.s, w)
	return nil
}
