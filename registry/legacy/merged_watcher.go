package legacy

import (
	"reflect"
	"sync"
	"time"

	"github.com/musterhq/muster/registry"
)

// mergedWatcher follows the parts of one service with one goroutine and
// publishes their merge.
type mergedWatcher struct {
	m       *Merged
	service string
	parts   []registry.Watcher
	names   []string // of the parts, for SourceKey
	// tags and settle are only used by update, which runs in
	// newMergedWatcher and then in run's goroutine.
	tags   tagger
	settle settler
	// again is when update is to run again for a hold to end (zero: no
	// hold); set by update.
	again time.Time
	ch    chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	snap registry.Snapshot
}

func newMergedWatcher(m *Merged, service string, parts []registry.Watcher, names []string) *mergedWatcher {
	w := &mergedWatcher{
		m: m, service: service, parts: parts, names: names,
		ch: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	w.update()
	go w.run()
	return w
}

// run merges again after any part's update, and when a hold of the
// settler ends, until stop or until a part's channel closes (its Discovery
// was closed).
func (w *mergedWatcher) run() {
	defer close(w.done)
	defer close(w.ch)
	settled := time.NewTimer(time.Hour)
	defer settled.Stop()
	cases := make([]reflect.SelectCase, 0, len(w.parts)+2)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.stop)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(settled.C)})
	for _, p := range w.parts {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.Updates())})
	}
	for {
		settled.Stop()
		if !w.again.IsZero() {
			settled.Reset(time.Until(w.again))
		}
		i, _, ok := reflect.Select(cases)
		if i == 0 || (i > 1 && !ok) {
			return
		}
		w.update()
	}
}

// update publishes the merge of the parts' snapshots, waking the reader if
// it changed.
func (w *mergedWatcher) update() {
	parts := make([]registry.Snapshot, len(w.parts))
	for i, p := range w.parts {
		parts[i] = p.Snapshot()
	}
	hidden, again := w.settle.hidden(parts, time.Now())
	w.again = again
	next := mergeSnapshots(w.service, w.names, parts, &w.tags, hidden)
	w.settle.merged(next)
	w.mu.Lock()
	changed := !sameSnapshot(w.snap, next)
	if changed {
		w.snap = next
	}
	w.mu.Unlock()
	if changed {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// sameSnapshot reports whether a reader would see no difference between
// two merged snapshots: the same instances (pointers: the parts and the
// tagger keep them) and state.
func sameSnapshot(a, b registry.Snapshot) bool {
	if a.Loaded != b.Loaded || !a.StaleSince.Equal(b.StaleSince) || a.Revision != b.Revision ||
		a.Generation != b.Generation || (a.Err == nil) != (b.Err == nil) ||
		(a.Err != nil && a.Err.Error() != b.Err.Error()) || len(a.Instances) != len(b.Instances) {
		return false
	}
	for i := range a.Instances {
		if a.Instances[i] != b.Instances[i] {
			return false
		}
	}
	return true
}

func (w *mergedWatcher) Updates() <-chan struct{} { return w.ch }

func (w *mergedWatcher) Snapshot() registry.Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snap
}

// Close stops the watcher and closes its parts. It is idempotent.
func (w *mergedWatcher) Close() error {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		for _, p := range w.parts {
			_ = p.Close()
		}
		w.m.forget(w)
	})
	return nil
}
