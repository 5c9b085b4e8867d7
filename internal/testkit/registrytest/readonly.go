package registrytest

import (
	"errors"
	"testing"

	"github.com/musterhq/muster/registry"
)

// ReadOnlyBackend is one fresh read-only registry (such as Kubernetes
// EndpointSlices) for a conformance test: the suite cannot register, so
// the backend's test writes the backend's own records through Publish.
type ReadOnlyBackend struct {
	// Discovery follows the backend. The suite does not close it.
	Discovery registry.Discovery
	// Publish makes instances the complete list of service in the
	// backend, as its own writers would (for Kubernetes: EndpointSlices),
	// creating, updating and deleting records as needed. A record whose
	// instance did not change must not be rewritten. The suite uses IDs,
	// addresses, zones and Draining only: read-only backends have no
	// weights or metadata of their own to carry.
	Publish func(t *testing.T, service string, instances ...registry.Instance)
}

// RunReadOnly runs the conformance cases that apply to a read-only
// backend, one fresh backend per subtest. What differs from Run: no
// Registrar (instances appear and leave through Publish), and instances
// carry only IDs, addresses, zones and draining; weights, versions and
// metadata are the backend's own and not checked.
func RunReadOnly(t *testing.T, newBackend func(t *testing.T) ReadOnlyBackend) {
	t.Run("PublishUpdateRemove", func(t *testing.T) { testPublish(t, newBackend(t)) })
	t.Run("InvalidName", func(t *testing.T) { testInvalidName(t, newBackend(t)) })
	t.Run("PrefixNamesAreIsolated", func(t *testing.T) { testReadOnlyIsolation(t, newBackend(t)) })
	t.Run("Draining", func(t *testing.T) { testReadOnlyDraining(t, newBackend(t)) })
	t.Run("WatcherLifecycle", func(t *testing.T) { testWatcher(t, Backend{Discovery: newBackend(t).Discovery}) })
	t.Run("LateWatcherWoken", func(t *testing.T) {
		b := newBackend(t)
		testLateWatcher(t, b.Discovery, func(in registry.Instance) { b.Publish(t, "late", in) })
	})
}

func testPublish(t *testing.T, b ReadOnlyBackend) {
	ctx := ctxT(t)
	w, err := b.Discovery.Watch(ctx, "greeter")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	WaitFor(t, w, "an empty, loaded snapshot", HasIDs())
	b.Publish(t, "greeter", inst("greeter", "b", 9001), inst("greeter", "a", 9002), inst("greeter", "c", 9003))
	s := WaitFor(t, w, "three instances", HasIDs("a", "b", "c"))
	if got := s.Instances[0]; got.Addr != "127.0.0.1:9002" || got.Zone != "z1" || got.EffectiveWeight() != registry.DefaultWeight {
		t.Fatalf("instance a discovered as %+v", got)
	}
	a := s.Instances[0]
	b.Publish(t, "greeter", inst("greeter", "a", 9002), inst("greeter", "c", 9004))
	s = WaitFor(t, w, "b gone, c moved", func(s registry.Snapshot) bool {
		return HasIDs("a", "c")(s) && s.Instances[1].Addr == "127.0.0.1:9004"
	})
	if s.Instances[0] != a {
		t.Fatalf("unchanged instance a is a new pointer: %+v", s.Instances[0])
	}
	b.Publish(t, "greeter")
	WaitFor(t, w, "all gone", HasIDs())
}

func testInvalidName(t *testing.T, b ReadOnlyBackend) {
	if _, err := b.Discovery.Watch(ctxT(t), "Bad Name"); !errors.Is(err, registry.ErrInvalidInstance) {
		t.Fatalf("Watch with a bad name = %v, want ErrInvalidInstance", err)
	}
}

func testReadOnlyIsolation(t *testing.T, b ReadOnlyBackend) {
	ctx := ctxT(t)
	b.Publish(t, "foo", inst("foo", "f1", 1))
	b.Publish(t, "foobar", inst("foobar", "fb1", 2))
	b.Publish(t, "fo", inst("fo", "o1", 3))
	w, err := b.Discovery.Watch(ctx, "foo")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	WaitFor(t, w, "only foo's instance", HasIDs("f1"))
	b.Publish(t, "foobar", inst("foobar", "fb1", 2), inst("foobar", "fb2", 4))
	b.Publish(t, "foo", inst("foo", "f1", 1), inst("foo", "f2", 5))
	WaitFor(t, w, "foo's second instance and no foobar", HasIDs("f1", "f2"))
}

func testReadOnlyDraining(t *testing.T, b ReadOnlyBackend) {
	ctx := ctxT(t)
	w, err := b.Discovery.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	in := inst("svc", "d1", 7000)
	b.Publish(t, "svc", in, inst("svc", "d2", 7001))
	WaitFor(t, w, "two instances", HasIDs("d1", "d2"))
	in.Draining = true
	b.Publish(t, "svc", in, inst("svc", "d2", 7001))
	WaitFor(t, w, "d1 draining", func(s registry.Snapshot) bool {
		return HasIDs("d1", "d2")(s) && s.Instances[0].EffectiveWeight() == 0 && s.Instances[1].EffectiveWeight() > 0
	})
	in.Draining = false
	b.Publish(t, "svc", in, inst("svc", "d2", 7001))
	WaitFor(t, w, "d1 back", func(s registry.Snapshot) bool {
		return HasIDs("d1", "d2")(s) && s.Instances[0].EffectiveWeight() > 0
	})
}
