package kubernetes_test

import (
	"net"
	"strconv"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

// TestConformance runs the read-only conformance suite: Publish writes one
// EndpointSlice per instance (so every service spans several slices)
// through the fake clientset, and deletes the slices of instances no
// longer listed.
func TestConformance(t *testing.T) {
	registrytest.RunReadOnly(t, func(t *testing.T) registrytest.ReadOnlyBackend {
		c := fake.NewClientset()
		return registrytest.ReadOnlyBackend{
			Discovery: newDiscovery(t, c),
			Publish:   func(t *testing.T, service string, ins ...registry.Instance) { publish(t, c, service, ins) },
		}
	})
}

// publish makes ins the instances of service: a slice per instance,
// written only when it changed.
func publish(t *testing.T, c *fake.Clientset, service string, ins []registry.Instance) {
	t.Helper()
	api := c.DiscoveryV1().EndpointSlices("default")
	old, err := api.List(ctxT(t), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		t.Fatal(err)
	}
	existing := map[string]discoveryv1.EndpointSlice{}
	for _, sl := range old.Items {
		existing[sl.Name] = sl
	}
	for _, in := range ins {
		host, portStr, err := net.SplitHostPort(in.Addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(portStr)
		st := isReady
		if in.Draining {
			st = isTerminating
		}
		sl := slice(service+"-"+in.ID, service, int32(port), ep(host, in.ID, in.Zone, st))
		if cur, ok := existing[sl.Name]; !ok || !equality.Semantic.DeepEqual(cur.Endpoints, sl.Endpoints) || !equality.Semantic.DeepEqual(cur.Ports, sl.Ports) {
			apply(t, c, sl)
		}
		delete(existing, sl.Name)
	}
	for name := range existing {
		remove(t, c, name)
	}
}
