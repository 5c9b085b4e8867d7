package watchhub_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

// svc is a followed service with a goroutine of its own, as a backend's.
type svc struct {
	key   string
	hub   *watchhub.Hub
	quit  chan struct{}
	done  chan struct{}
	stops atomic.Int32
}

func (s *svc) stopped() bool { return s.stops.Load() > 0 }

// services records the services started by a Services and stops them.
type services struct {
	*watchhub.Services[*svc]
	mu      sync.Mutex
	started []*svc
}

func newServices(linger time.Duration) *services {
	return &services{Services: watchhub.NewServices(func(s *svc) {
		if s.stops.Add(1) == 1 {
			close(s.quit)
		}
		<-s.done
	}, linger)}
}

// start returns the start function of key's service.
func (ss *services) start(key string) func(*watchhub.Hub) *svc {
	return func(h *watchhub.Hub) *svc {
		s := &svc{key: key, hub: h, quit: make(chan struct{}), done: make(chan struct{})}
		go func() {
			defer close(s.done)
			<-s.quit
		}()
		ss.mu.Lock()
		ss.started = append(ss.started, s)
		ss.mu.Unlock()
		return s
	}
}

func (ss *services) watch(t *testing.T, ctx context.Context, key string) registry.Watcher {
	t.Helper()
	w, err := ss.Watch(ctx, key, key+"-alias", ss.start(key))
	if err != nil {
		t.Fatalf("Watch(%q): %v", key, err)
	}
	return w
}

func (ss *services) all() []*svc {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return append([]*svc(nil), ss.started...)
}

func (ss *services) get(t *testing.T, key string) *svc {
	t.Helper()
	s, ok := ss.Get(key)
	if !ok {
		t.Fatalf("%q not followed", key)
	}
	return s
}

func wantCounts(t *testing.T, ss *services, services, watchers int) {
	t.Helper()
	if s, w := ss.Counts(); s != services || w != watchers {
		t.Fatalf("Counts() = %d services, %d watchers; want %d, %d", s, w, services, watchers)
	}
}

func closeWatcher(t *testing.T, w registry.Watcher) {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Fatalf("watcher Close: %v", err)
	}
}

func TestServicesShareOneServicePerKey(t *testing.T) {
	ss := newServices(0)
	defer ss.Close()
	a1, a2, b := ss.watch(t, t.Context(), "a"), ss.watch(t, t.Context(), "a"), ss.watch(t, t.Context(), "b")
	if n := len(ss.all()); n != 2 {
		t.Fatalf("%d services started for two keys", n)
	}
	wantCounts(t, ss, 2, 3)
	var keys []string
	ss.Each(func(s *svc) { keys = append(keys, s.key) })
	sort.Strings(keys)
	if fmt.Sprint(keys) != "[a b]" {
		t.Fatalf("Each visited %v", keys)
	}
	ss.get(t, "a").hub.Update(func(s *registry.Snapshot) bool { s.Loaded = true; return true })
	if !woken(a1.Updates()) || !woken(a2.Updates()) || woken(b.Updates()) {
		t.Fatalf("an update of a's hub must wake a's watchers only")
	}
	if s := a1.Snapshot(); s.Service != "a-alias" || !s.Loaded {
		t.Fatalf("watcher's snapshot %+v", s)
	}
}

func TestServicesStopOnLastClose(t *testing.T) {
	ss := newServices(0)
	defer ss.Close()
	w1, w2 := ss.watch(t, t.Context(), "a"), ss.watch(t, t.Context(), "a")
	s := ss.get(t, "a")
	closeWatcher(t, w1)
	if s.stopped() {
		t.Fatalf("stopped with a watcher left")
	}
	closeWatcher(t, w2)
	if s.stops.Load() != 1 {
		t.Fatalf("stopped %d times after its last watcher closed; want once", s.stops.Load())
	}
	wantCounts(t, ss, 0, 0)
	closeWatcher(t, w2)
	ss.watch(t, t.Context(), "a")
	if n := len(ss.all()); n != 2 || ss.get(t, "a") == s {
		t.Fatalf("a Watch after the stop must start a new service (%d started)", n)
	}
}

func TestServicesContextEndsLastWatcher(t *testing.T) {
	ss := newServices(0)
	defer ss.Close()
	ctx, cancel := context.WithCancel(t.Context())
	ss.watch(t, ctx, "a")
	s := ss.get(t, "a")
	cancel()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("service not stopped within 10s of its last watcher's context ending")
	}
	if _, err := ss.Watch(ctx, "a", "a", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch with an ended context: %v, want context.Canceled", err)
	}
}

func TestServicesWatcherAddedBeforeReleaseKeepsService(t *testing.T) {
	ss := newServices(0)
	defer ss.Close()
	w1 := ss.watch(t, t.Context(), "a")
	s := ss.get(t, "a")
	var w2 registry.Watcher
	watchhub.SetBeforeRelease(ss.Services, func() {
		watchhub.SetBeforeRelease(ss.Services, nil)
		w2 = ss.watch(t, t.Context(), "a") // between the last Close and its release
	})
	closeWatcher(t, w1)
	if s.stopped() {
		t.Fatalf("the service was stopped under a watcher added before the release")
	}
	wantCounts(t, ss, 1, 1)
	if len(ss.all()) != 1 {
		t.Fatalf("the new watcher started another service")
	}
	closeWatcher(t, w2)
	if !s.stopped() {
		t.Fatalf("not stopped after the added watcher closed")
	}
}

func TestServicesLateReleaseLeavesNewService(t *testing.T) {
	ss := newServices(0)
	defer ss.Close()
	w1 := ss.watch(t, t.Context(), "a")
	old := ss.get(t, "a")
	watchhub.SetBeforeRelease(ss.Services, func() {
		// Before w1's release: another watcher comes and goes (its
		// release stops the service), then a third starts a new one.
		watchhub.SetBeforeRelease(ss.Services, nil)
		closeWatcher(t, ss.watch(t, t.Context(), "a"))
		ss.watch(t, t.Context(), "a")
	})
	closeWatcher(t, w1)
	cur := ss.get(t, "a")
	if cur == old || old.stops.Load() != 1 || cur.stopped() {
		t.Fatalf("old stopped %d times (want 1), new stopped %v (want false)", old.stops.Load(), cur.stopped())
	}
	wantCounts(t, ss, 1, 1)
}

func TestServicesLinger(t *testing.T) {
	ss := newServices(time.Hour)
	w := ss.watch(t, t.Context(), "a")
	s := ss.get(t, "a")
	closeWatcher(t, w)
	if s.stopped() {
		t.Fatalf("stopped at once despite the linger time")
	}
	wantCounts(t, ss, 1, 0)
	ss.watch(t, t.Context(), "a")
	if ss.get(t, "a") != s || len(ss.all()) != 1 {
		t.Fatalf("a Watch while lingering must keep the service")
	}
	ss.Close()
	if s.stops.Load() != 1 {
		t.Fatalf("Close stopped the lingering service %d times; want once", s.stops.Load())
	}

	short := newServices(time.Millisecond)
	defer short.Close()
	closeWatcher(t, short.watch(t, t.Context(), "a"))
	s = short.get(t, "a")
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("not stopped within 10s after a linger of 1ms")
	}
	wantCounts(t, short, 0, 0)
}

// A linger timer that fired after a Watch had cancelled it, and a later
// release had armed a new one, leaves the service to the new timer: an
// idle, lingering service is not stopped by a stale timer.
func TestServicesStaleLingerStopsNothing(t *testing.T) {
	ss := newServices(time.Hour)
	defer ss.Close()
	closeWatcher(t, ss.watch(t, t.Context(), "a"))
	s := ss.get(t, "a")
	watchhub.FireStaleLinger(ss.Services, "a")
	if s.stopped() {
		t.Fatal("a stale linger timer stopped the service its current timer keeps")
	}
	wantCounts(t, ss, 1, 0)
}

func TestServicesClose(t *testing.T) {
	ss := newServices(0)
	ws := []registry.Watcher{ss.watch(t, t.Context(), "a"), ss.watch(t, t.Context(), "a"), ss.watch(t, t.Context(), "b")}
	if !ss.Close() {
		t.Fatalf("first Close reported the set closed already")
	}
	if ss.Close() {
		t.Fatalf("second Close reported closing the set")
	}
	for _, s := range ss.all() {
		if s.stops.Load() != 1 {
			t.Fatalf("%s stopped %d times; want once", s.key, s.stops.Load())
		}
	}
	for _, w := range ws {
		closedWithin(t, w.Updates())
		closeWatcher(t, w)
	}
	wantCounts(t, ss, 0, 0)
	if _, err := ss.Watch(t.Context(), "a", "a", nil); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Watch after Close: %v, want registry.ErrClosed", err)
	}
	for _, s := range ss.all() {
		if s.stops.Load() != 1 {
			t.Fatalf("%s stopped %d times after its watchers closed; want once", s.key, s.stops.Load())
		}
	}
}

func TestServicesConcurrentWatchAndClose(t *testing.T) {
	for _, linger := range []time.Duration{0, time.Microsecond} {
		ss := newServices(linger)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				for i := range 200 {
					key := fmt.Sprint("svc", i%3)
					w, err := ss.Watch(ctx, key, key, ss.start(key))
					if errors.Is(err, registry.ErrClosed) {
						return
					}
					if err != nil {
						t.Errorf("Watch: %v", err)
						return
					}
					ss.Counts()
					if (g+i)%2 == 0 {
						_ = w.Close()
					}
				}
			})
		}
		wg.Go(func() {
			for range 100 {
				ss.Each(func(*svc) {})
			}
			ss.Close()
		})
		wg.Wait()
		ss.Close()
		for _, s := range ss.all() {
			if n := s.stops.Load(); n != 1 {
				t.Fatalf("linger %v: a service stopped %d times; want once", linger, n)
			}
		}
	}
}

// Close returns only once every service has stopped, a service whose
// last watcher left just before (its stop begun, out of the map) too:
// the backends promise that Close waits for their goroutines.
func TestServicesCloseWaitsForAStopInProgress(t *testing.T) {
	entered, unblock := make(chan struct{}), make(chan struct{})
	var stopped atomic.Bool
	ss := watchhub.NewServices(func(*svc) {
		close(entered)
		<-unblock
		stopped.Store(true)
	}, 0)
	w, err := ss.Watch(context.Background(), "a", "a", func(h *watchhub.Hub) *svc { return &svc{key: "a", hub: h} })
	if err != nil {
		t.Fatal(err)
	}
	go w.Close() // the last watcher: its release stops "a"
	<-entered
	closed := make(chan struct{})
	go func() {
		ss.Close()
		close(closed)
	}()
	// Close must still be waiting; give it time to return wrongly.
	select {
	case <-closed:
		t.Fatal("Close returned while a service was still stopping")
	case <-time.After(200 * time.Millisecond):
	}
	close(unblock)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s of the stop's end")
	}
	if !stopped.Load() {
		t.Fatal("Close returned before the stop ended")
	}
}

// Stats counts services and watchers and describes each service by key,
// sorted, from its snapshot.
func TestServicesStats(t *testing.T) {
	ss := newServices(0)
	defer ss.Close()
	ctx := context.Background()
	ss.watch(t, ctx, "b")
	ss.watch(t, ctx, "b")
	ss.watch(t, ctx, "a")
	stale := time.Now().Add(-time.Minute)
	ss.get(t, "b").hub.Update(func(s *registry.Snapshot) bool {
		s.Loaded, s.StaleSince = true, stale
		s.Instances = []*registry.Instance{{ID: "1"}, {ID: "2"}}
		return true
	})
	st := ss.Stats()
	want := []registry.ServiceStats{{Name: "a"}, {Name: "b", Instances: 2, Watchers: 2, StaleSince: stale, Loaded: true}}
	want[0].Watchers = 1
	if st.Services != 2 || st.Watchers != 3 || fmt.Sprint(st.PerService) != fmt.Sprint(want) {
		t.Fatalf("Stats = %+v, want 2 services, 3 watchers, per service %+v", st, want)
	}
}
