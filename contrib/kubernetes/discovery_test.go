package kubernetes_test

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/musterhq/muster/contrib/kubernetes"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

// A service spread over several slices is the union of all of them: a
// change to one slice does not replace the others (go-zero's resolver
// keeps only the slice of the last event).
func TestSlicesAreAggregated(t *testing.T) {
	c := fake.NewClientset(
		slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady), ep("10.0.0.2", "b", "z2", isReady)),
		slice("web-2", "web", 9000, ep("10.0.0.3", "c", "z1", isReady)),
		slice("other-1", "other", 9000, ep("10.0.1.1", "x", "z1", isReady)),
	)
	d := newDiscovery(t, c)
	w := follow(t, d, "web")
	s := registrytest.WaitFor(t, w, "both slices", registrytest.HasIDs("a", "b", "c"))
	a := byID(s, "a")
	if a.Addr != "10.0.0.1:9000" || a.Zone != "z1" || a.Name != "web.default" || a.EffectiveWeight() != registry.DefaultWeight ||
		a.Metadata[kubernetes.MetaPod] != "a" || a.Metadata[kubernetes.MetaNode] != "node-z1" || a.Metadata[kubernetes.MetaNamespace] != "default" {
		t.Fatalf("instance a is %+v", *a)
	}
	if s.Service != "web" || s.Revision != 1 || s.Generation != 1 || s.Stale() {
		t.Fatalf("first snapshot %s", registrytest.Describe(s))
	}
	apply(t, c, slice("web-2", "web", 9000, ep("10.0.0.3", "c", "z1", isReady), ep("10.0.0.4", "d", "z2", isReady)))
	s = registrytest.WaitFor(t, w, "d added to the second slice, the first kept", registrytest.HasIDs("a", "b", "c", "d"))
	if byID(s, "a") != a {
		t.Fatalf("unchanged instance a got a new pointer")
	}
	apply(t, c, slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady)))
	registrytest.WaitFor(t, w, "b left the first slice, the second kept", registrytest.HasIDs("a", "c", "d"))
}

// A pod that terminates is first drained (no new calls), then absent.
func TestTerminatingPodDrains(t *testing.T) {
	c := fake.NewClientset(slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady), ep("10.0.0.2", "b", "z1", isReady)))
	d := newDiscovery(t, c)
	w := follow(t, d, "web.default")
	registrytest.WaitFor(t, w, "two ready", registrytest.HasIDs("a", "b"))
	apply(t, c, slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady), ep("10.0.0.2", "b", "z1", isTerminating)))
	s := registrytest.WaitFor(t, w, "b draining", func(s registry.Snapshot) bool {
		b := byID(s, "b")
		return b != nil && b.EffectiveWeight() == 0
	})
	if b := byID(s, "b"); !b.Draining || b.Addr != "10.0.0.2:9000" {
		t.Fatalf("terminating b is %+v", *b)
	}
	if a := byID(s, "a"); a.EffectiveWeight() != registry.DefaultWeight {
		t.Fatalf("ready a is %+v", *a)
	}
	apply(t, c, slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady), ep("10.0.0.2", "b", "z1", isGone)))
	registrytest.WaitFor(t, w, "b gone once not serving", registrytest.HasIDs("a"))
	apply(t, c, slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady), ep("10.0.0.3", "c", "z1", isStarting)))
	registrytest.WaitFor(t, w, "a starting pod left out", registrytest.HasIDs("a"))
}

// The EndpointSlice controller replaces a slice by creating the new one
// and deleting the old: an endpoint in both is listed once, and deleting
// a slice removes only its endpoints.
func TestSliceReplacedAndDeleted(t *testing.T) {
	c := fake.NewClientset(
		slice("web-1old", "web", 9000, ep("10.0.0.1", "a", "z1", isReady), ep("10.0.0.2", "b", "z1", isTerminating)),
		slice("web-x", "web", 9000, ep("10.0.0.9", "x", "z1", isReady)),
	)
	d := newDiscovery(t, c)
	w := follow(t, d, "web")
	registrytest.WaitFor(t, w, "the old slices", registrytest.HasIDs("a", "b", "x"))
	apply(t, c, slice("web-2new", "web", 9000, ep("10.0.0.2", "b", "z1", isReady), ep("10.0.0.3", "c", "z1", isReady)))
	s := registrytest.WaitFor(t, w, "both slices, b once", registrytest.HasIDs("a", "b", "c", "x"))
	if b := byID(s, "b"); b.Draining {
		t.Fatalf("b is ready in the new slice and draining in the old: want ready, got %+v", *b)
	}
	remove(t, c, "web-1old")
	registrytest.WaitFor(t, w, "the old slice's endpoints gone", registrytest.HasIDs("b", "c", "x"))
	remove(t, c, "web-x")
	registrytest.WaitFor(t, w, "x's slice deleted", registrytest.HasIDs("b", "c"))
	remove(t, c, "web-2new")
	registrytest.WaitFor(t, w, "no slice left", registrytest.HasIDs())
}

// A slice relabelled to another service leaves this one, even where the
// watch does not filter by label (the fake clientset's does not).
func TestSliceRelabelled(t *testing.T) {
	c := fake.NewClientset(
		slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady)),
		slice("web-2", "web", 9000, ep("10.0.0.2", "b", "z1", isReady)),
	)
	d := newDiscovery(t, c)
	w := follow(t, d, "web")
	registrytest.WaitFor(t, w, "both", registrytest.HasIDs("a", "b"))
	apply(t, c, slice("web-2", "api", 9000, ep("10.0.0.2", "b", "z1", isReady)))
	registrytest.WaitFor(t, w, "b gone with its slice's label", registrytest.HasIDs("a"))
}

// The port is chosen by name; slices where it cannot be are skipped,
// logged and counted, and the others served.
func TestPortByName(t *testing.T) {
	two := slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady), ep("10.0.0.2", "b", "z1", isReady))
	httpPort := int32(8080)
	two.Ports = append(two.Ports, two.Ports[0])
	two.Ports[0].Name, two.Ports[0].Port = new("http"), &httpPort
	one := slice("web-2", "web", 9001, ep("10.0.0.3", "c", "z1", isReady))
	c := fake.NewClientset(two, one)

	named := newDiscovery(t, c, kubernetes.WithPort("grpc"))
	s := registrytest.WaitFor(t, follow(t, named, "web"), "all three", registrytest.HasIDs("a", "b", "c"))
	if a, c := byID(s, "a"), byID(s, "c"); a.Addr != "10.0.0.1:9000" || c.Addr != "10.0.0.3:9001" {
		t.Fatalf("addresses %s and %s", a.Addr, c.Addr)
	}
	if n := named.Stats().SkippedEndpoints; n != 0 {
		t.Fatalf("SkippedEndpoints = %d with WithPort", n)
	}

	only := newDiscovery(t, c)
	registrytest.WaitFor(t, follow(t, only, "web"), "the one-port slice only", registrytest.HasIDs("c"))
	if n := only.Stats().SkippedEndpoints; n != 2 {
		t.Fatalf("SkippedEndpoints = %d, want the 2 endpoints of the two-port slice", n)
	}
	wrong := newDiscovery(t, c, kubernetes.WithPort("admin"))
	registrytest.WaitFor(t, follow(t, wrong, "web"), "no slice has port admin", registrytest.HasIDs())
	if n := wrong.Stats().SkippedEndpoints; n != 3 {
		t.Fatalf("SkippedEndpoints = %d, want 3", n)
	}
}

// Version comes from a slice label when asked.
func TestVersionLabel(t *testing.T) {
	sl := slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady))
	sl.Labels["app.kubernetes.io/version"] = "v1.4.2"
	c := fake.NewClientset(sl)
	d := newDiscovery(t, c, kubernetes.WithVersionLabel("app.kubernetes.io/version"))
	s := registrytest.WaitFor(t, follow(t, d, "web"), "a", registrytest.HasIDs("a"))
	if v := s.Instances[0].Version; v != "v1.4.2" {
		t.Fatalf("Version = %q", v)
	}
}

// Every watcher of a service, by either of its names, shares one
// informer: one list and one watch request.
func TestOneInformerPerService(t *testing.T) {
	c := fake.NewClientset(slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady)))
	d := newDiscovery(t, c)
	w1 := follow(t, d, "web")
	w2 := follow(t, d, "web.default")
	w3 := follow(t, d, "web")
	for _, w := range []registry.Watcher{w1, w2, w3} {
		registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	}
	// A change arrives only through the watch, so the watch is open now.
	apply(t, c, slice("web-2", "web", 9000, ep("10.0.0.2", "b", "z1", isReady)))
	for _, w := range []registry.Watcher{w1, w2, w3} {
		registrytest.WaitFor(t, w, "b through the watch", registrytest.HasIDs("a", "b"))
	}
	if got := w2.Snapshot().Service; got != "web.default" {
		t.Fatalf("Snapshot().Service = %q, want the name watched", got)
	}
	lists, watches := 0, 0
	for _, a := range c.Actions() {
		if a.GetResource().Resource != "endpointslices" {
			continue
		}
		switch a.GetVerb() {
		case "list":
			lists++
		case "watch":
			watches++
		}
	}
	if lists != 1 || watches != 1 {
		t.Fatalf("%d lists and %d watches for three watchers of one service, want 1 and 1", lists, watches)
	}
	if st := d.Stats(); st.Services != 1 || st.Watchers != 3 {
		t.Fatalf("Stats %+v", st)
	}
	for _, w := range []registry.Watcher{w1, w2, w3} {
		_ = w.Close()
	}
	if st := d.Stats(); st.Services != 0 || st.Watchers != 0 {
		t.Fatalf("after every watcher closed, Stats %+v", st)
	}
}

// Close closes every watcher and stops every informer (TestMain checks
// that no goroutine is left).
func TestClose(t *testing.T) {
	c := fake.NewClientset(slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady)))
	d := newDiscovery(t, c)
	w := follow(t, d, "web")
	registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-w.Updates(); open {
		for range w.Updates() {
		}
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := d.Watch(ctxT(t), "web"); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Watch after Close = %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("watcher Close after Discovery Close: %v", err)
	}
}

func TestNames(t *testing.T) {
	d := newDiscovery(t, fake.NewClientset())
	for _, bad := range []string{"a.b.c", "web_1", "1web", "Web", "web.", strings.Repeat("a", 64)} {
		if _, err := d.Watch(ctxT(t), bad); !errors.Is(err, registry.ErrInvalidInstance) {
			t.Errorf("Watch(%q) = %v, want ErrInvalidInstance", bad, err)
		}
	}
	c := fake.NewClientset(slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady)))
	ns := newDiscovery(t, c, kubernetes.WithNamespace("prod"))
	registrytest.WaitFor(t, follow(t, ns, "web"), "nothing in namespace prod", registrytest.HasIDs())
	registrytest.WaitFor(t, follow(t, ns, "web.default"), "a in default", registrytest.HasIDs("a"))
}

func TestInvalidOptions(t *testing.T) {
	for name, opt := range map[string]kubernetes.Option{
		"WithNamespace":    kubernetes.WithNamespace("Not_A_Namespace"),
		"WithPort":         kubernetes.WithPort(""),
		"WithVersionLabel": kubernetes.WithVersionLabel(""),
		"WithLogger":       kubernetes.WithLogger(nil),
	} {
		_, err := kubernetes.NewDiscovery(fake.NewClientset(), opt)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("NewDiscovery with a bad %s = %v, want an error naming it", name, err)
		}
	}
	if _, err := kubernetes.NewDiscovery(nil); err == nil {
		t.Errorf("NewDiscovery(nil) succeeded")
	}
}
