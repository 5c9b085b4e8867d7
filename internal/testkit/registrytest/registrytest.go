// Package registrytest holds the behaviour every registry backend must
// share, as a conformance suite each backend's tests run, and small helpers
// for waiting on a Watcher.
//
// The etcd backend (registry/etcd) and the ZooKeeper backend
// (registry/zookeeper, standalone and on an ensemble) run the suite as it
// is: their semantics differ in how they keep instances (a lease, a
// session) and store overrides, not in anything the suite checks.
package registrytest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// WaitTimeout bounds every wait in the suite.
const WaitTimeout = 10 * time.Second

// Backend is one fresh registry for a conformance test.
type Backend struct {
	// NewRegistrar returns a new Registrar on the backend. The suite
	// closes it.
	NewRegistrar func(t *testing.T) registry.Registrar
	// Discovery follows the same backend. The suite does not close it.
	Discovery registry.Discovery
	// Raw lists the raw keys stored under a service, to check what a
	// registrar wrote, bypassing Discovery.
	Raw func(t *testing.T, service string) []string
}

// WaitFor waits until cond holds for w's snapshot, failing t with what after
// WaitTimeout. It returns the snapshot that satisfied cond.
func WaitFor(t testing.TB, w registry.Watcher, what string, cond func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	return WaitForWithin(t, w, WaitTimeout, what, cond)
}

// WaitForWithin is WaitFor with its own bound.
func WaitForWithin(t testing.TB, w registry.Watcher, d time.Duration, what string, cond func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		s := w.Snapshot()
		if cond(s) {
			return s
		}
		select {
		case _, ok := <-w.Updates():
			if !ok {
				t.Fatalf("watcher closed while waiting for %s; last snapshot %s", what, Describe(w.Snapshot()))
			}
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for %s; last snapshot %s", d, what, Describe(w.Snapshot()))
		}
	}
}

// IDs returns the instance IDs of s, in order.
func IDs(s registry.Snapshot) []string {
	ids := make([]string, len(s.Instances))
	for i, in := range s.Instances {
		ids[i] = in.ID
	}
	return ids
}

// HasIDs returns a condition that holds when a loaded snapshot has exactly
// ids (in any order given; snapshots are sorted).
func HasIDs(ids ...string) func(registry.Snapshot) bool {
	want := append([]string(nil), ids...)
	sort.Strings(want)
	return func(s registry.Snapshot) bool {
		return s.Loaded && strings.Join(IDs(s), ",") == strings.Join(want, ",")
	}
}

// Describe renders a snapshot for failure messages.
func Describe(s registry.Snapshot) string {
	return fmt.Sprintf("{service %s loaded %v rev %d stale %v err %v ids %v retired %v}",
		s.Service, s.Loaded, s.Revision, s.Stale(), s.Err, IDs(s), s.Retired)
}

// Run runs the conformance suite against a backend made by newBackend for
// each subtest.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) {
	t.Run("RegisterDeregisterClose", func(t *testing.T) { testLifecycle(t, newBackend(t)) })
	t.Run("InvalidInstanceWritesNothing", func(t *testing.T) { testInvalid(t, newBackend(t)) })
	t.Run("PrefixNamesAreIsolated", func(t *testing.T) { testIsolation(t, newBackend(t)) })
	t.Run("UpdateAndIdempotentRegister", func(t *testing.T) { testUpdate(t, newBackend(t)) })
	t.Run("WatcherLifecycle", func(t *testing.T) { testWatcher(t, newBackend(t)) })
	t.Run("DeregisterIsRetired", func(t *testing.T) { testRetired(t, newBackend(t)) })
	t.Run("LateWatcherWoken", func(t *testing.T) {
		b := newBackend(t)
		r := b.NewRegistrar(t)
		defer r.Close()
		testLateWatcher(t, b.Discovery, func(in registry.Instance) {
			if err := r.Register(ctxT(t), in); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func inst(name, id string, port int) registry.Instance {
	return registry.Instance{Name: name, ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", port), Zone: "z1", Version: "v1"}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func testLifecycle(t *testing.T, b Backend) {
	ctx := ctxT(t)
	w, err := b.Discovery.Watch(ctx, "greeter")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := b.NewRegistrar(t)
	for i, id := range []string{"b", "a", "c"} {
		if err := r.Register(ctx, inst("greeter", id, 9001+i)); err != nil {
			t.Fatalf("Register %s: %v", id, err)
		}
	}
	s := WaitFor(t, w, "three instances", HasIDs("a", "b", "c"))
	if got := s.Instances[0]; got.Addr != "127.0.0.1:9002" || got.Zone != "z1" || got.Version != "v1" || got.Weight != registry.DefaultWeight {
		t.Fatalf("instance a discovered as %+v", got)
	}
	if s.Instances[0].RegisteredAt.IsZero() {
		t.Fatalf("RegisteredAt not set by the registrar")
	}
	if err := r.Deregister(ctx, "greeter", "b"); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if got := b.Raw(t, "greeter"); len(got) != 2 {
		t.Fatalf("after Deregister returned, raw keys are %v, want 2", got)
	}
	WaitFor(t, w, "b gone", HasIDs("a", "c"))
	if err := r.Deregister(ctx, "greeter", "never"); err != nil {
		t.Fatalf("Deregister of an unknown instance: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := b.Raw(t, "greeter"); len(got) != 0 {
		t.Fatalf("after Close returned, raw keys are %v, want none", got)
	}
	WaitFor(t, w, "all gone after Close", HasIDs())
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := r.Register(ctx, inst("greeter", "late", 1)); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Register after Close = %v, want ErrClosed", err)
	}
}

func testInvalid(t *testing.T, b Backend) {
	ctx := ctxT(t)
	r := b.NewRegistrar(t)
	defer r.Close()
	bad := []registry.Instance{
		{Name: "", Addr: "127.0.0.1:1"},
		{Name: "svc", Addr: "127.0.0.1"},
		{Name: "svc", Addr: "127.0.0.1:1", Weight: registry.MaxWeight + 1},
		{Name: "svc", Addr: "127.0.0.1:1", ID: "a/b"},
	}
	for _, in := range bad {
		err := r.Register(ctx, in)
		if !errors.Is(err, registry.ErrInvalidInstance) {
			t.Errorf("Register(%+v) = %v, want ErrInvalidInstance", in, err)
		}
	}
	if got := b.Raw(t, "svc"); len(got) != 0 {
		t.Fatalf("invalid registrations wrote keys %v", got)
	}
	if _, err := b.Discovery.Watch(ctx, "Bad Name"); !errors.Is(err, registry.ErrInvalidInstance) {
		t.Fatalf("Watch with a bad name = %v, want ErrInvalidInstance", err)
	}
}

func testIsolation(t *testing.T, b Backend) {
	ctx := ctxT(t)
	r := b.NewRegistrar(t)
	defer r.Close()
	for _, in := range []registry.Instance{inst("foo", "f1", 1), inst("foobar", "fb1", 2), inst("fo", "o1", 3)} {
		if err := r.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	w, err := b.Discovery.Watch(ctx, "foo")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	WaitFor(t, w, "only foo's instance", HasIDs("f1"))
	if err := r.Register(ctx, inst("foobar", "fb2", 4)); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(ctx, inst("foo", "f2", 5)); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, w, "foo's second instance and no foobar", HasIDs("f1", "f2"))
}

func testUpdate(t *testing.T, b Backend) {
	ctx := ctxT(t)
	r := b.NewRegistrar(t)
	defer r.Close()
	w, err := b.Discovery.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	in := inst("svc", "", 7000) // ID defaults to the address
	if err := r.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	s := WaitFor(t, w, "instance with ID from addr", HasIDs("127.0.0.1:7000"))
	first := s.Instances[0].RegisteredAt
	in.Weight = 250
	in.Metadata = map[string]string{"color": "blue"}
	if err := r.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	s = WaitFor(t, w, "weight 250", func(s registry.Snapshot) bool {
		return len(s.Instances) == 1 && s.Instances[0].Weight == 250
	})
	if s.Instances[0].Metadata["color"] != "blue" {
		t.Fatalf("metadata not updated: %+v", s.Instances[0])
	}
	if !s.Instances[0].RegisteredAt.Equal(first) {
		t.Fatalf("RegisteredAt changed on update: %v then %v", first, s.Instances[0].RegisteredAt)
	}
	in.Draining = true
	if err := r.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, w, "draining", func(s registry.Snapshot) bool {
		return len(s.Instances) == 1 && s.Instances[0].EffectiveWeight() == 0
	})
	if got := b.Raw(t, "svc"); len(got) != 1 {
		t.Fatalf("updates left keys %v, want exactly one", got)
	}
}

func testWatcher(t *testing.T, b Backend) {
	ctx := ctxT(t)
	wctx, cancel := context.WithCancel(ctx)
	w, err := b.Discovery.Watch(wctx, "empty")
	if err != nil {
		t.Fatal(err)
	}
	s := WaitFor(t, w, "an empty, loaded snapshot", HasIDs())
	if s.Service != "empty" || s.Stale() {
		t.Fatalf("snapshot %s", Describe(s))
	}
	cancel()
	deadline := time.After(WaitTimeout)
	for open := true; open; {
		select {
		case _, open = <-w.Updates():
		case <-deadline:
			t.Fatalf("Updates not closed after the Watch context was cancelled")
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close after context end: %v", err)
	}
	w2, err := b.Discovery.Watch(ctx, "empty")
	if err != nil {
		t.Fatal(err)
	}
	WaitFor(t, w2, "a new watcher loads", HasIDs())
	_ = w2.Close()
	_ = w2.Close()
}
