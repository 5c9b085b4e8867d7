package kubernetes_test

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

// DiscoveryStats reports the shape every backend shares (what package
// metrics collects): services by "name.namespace", their instances and
// watchers, and the skipped endpoints.
func TestDiscoveryStats(t *testing.T) {
	two := slice("web-1", "web", 9000, ep("10.0.0.1", "a", "z1", isReady), ep("10.0.0.2", "b", "z1", isReady))
	two.Ports = append(two.Ports, two.Ports[0]) // two ports, none chosen: skipped
	c := fake.NewClientset(two, slice("web-2", "web", 9001, ep("10.0.0.3", "c", "z1", isReady)))
	d := newDiscovery(t, c)
	var _ registry.StatsReporter = d
	w := follow(t, d, "web")
	follow(t, d, "web.default")
	registrytest.WaitFor(t, w, "c, the two-port slice skipped", registrytest.HasIDs("c"))
	st := d.DiscoveryStats()
	if st.Services != 1 || st.Watchers != 2 || st.SkippedValues != 2 || st.SkippedValues != d.Stats().SkippedEndpoints ||
		len(st.PerService) != 1 {
		t.Fatalf("DiscoveryStats %+v, want one service, two watchers, two endpoints skipped", st)
	}
	if s := st.PerService[0]; s.Name != "web.default" || s.Instances != 1 || s.Watchers != 2 || !s.Loaded || !s.StaleSince.IsZero() {
		t.Fatalf("service stats %+v, want web.default loaded, fresh, with one instance and two watchers", s)
	}
}
