package kubernetes_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

// apiOutage makes the fake API server refuse list and watch requests of
// endpoint slices while down, and can end the open watches as a lost
// connection does.
type apiOutage struct {
	down atomic.Bool

	mu      sync.Mutex
	watches []watch.Interface
}

var errAPIDown = errors.New("connection refused")

func newOutage(c *fake.Clientset) *apiOutage {
	o := &apiOutage{}
	c.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return o.down.Load(), nil, errAPIDown // not handled while up: the tracker answers
	})
	c.PrependWatchReactor("endpointslices", func(a k8stesting.Action) (bool, watch.Interface, error) {
		// The check and the record are one step under mu, so a watch
		// opened while cut runs is either refused or ended by it.
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.down.Load() {
			return true, nil, errAPIDown
		}
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(k8stesting.WatchActionImpl).ListOptions)
		if err != nil {
			return true, nil, err
		}
		o.watches = append(o.watches, w)
		return true, w, nil
	})
	return o
}

// cut takes the API server down and ends every open watch.
func (o *apiOutage) cut() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down.Store(true)
	for _, w := range o.watches {
		w.Stop()
	}
	o.watches = nil
}

// While the API server is unreachable the snapshot keeps the last known
// instances and says since when it is stale; when it answers again the
// changes made meanwhile arrive and the snapshot is fresh.
func TestStaleWhileAPIDown(t *testing.T) {
	c := fake.NewClientset(slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady)))
	out := newOutage(c)
	d := newDiscovery(t, c)
	w := follow(t, d, "web")
	registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	out.cut()
	s := registrytest.WaitFor(t, w, "stale", registry.Snapshot.Stale)
	if !registrytest.HasIDs("a")(s) || !errors.Is(s.Err, errAPIDown) {
		t.Fatalf("stale snapshot %s, want a kept and the API error", registrytest.Describe(s))
	}
	if d.Stats().ListWatchErrors == 0 {
		t.Fatalf("ListWatchErrors not counted")
	}
	apply(t, c, slice("web-2", "web", 9000, ep("10.0.0.2", "b", "z1", isReady)))
	out.down.Store(false)
	s = registrytest.WaitFor(t, w, "fresh, with b added during the outage", func(s registry.Snapshot) bool {
		return !s.Stale() && registrytest.HasIDs("a", "b")(s)
	})
	if s.Err != nil {
		t.Fatalf("fresh snapshot has Err %v", s.Err)
	}
}

// A service whose first list fails has no instances known: the snapshot
// is not Loaded but says why, so the resolver can report the error.
func TestFirstListFails(t *testing.T) {
	c := fake.NewClientset(slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady)))
	out := newOutage(c)
	out.down.Store(true)
	d := newDiscovery(t, c)
	w := follow(t, d, "web")
	s := registrytest.WaitFor(t, w, "stale before loading", registry.Snapshot.Stale)
	if s.Loaded || !errors.Is(s.Err, errAPIDown) {
		t.Fatalf("snapshot %s", registrytest.Describe(s))
	}
	out.down.Store(false)
	registrytest.WaitFor(t, w, "loaded once the API answers", func(s registry.Snapshot) bool {
		return !s.Stale() && registrytest.HasIDs("a")(s)
	})
}
