package etcd_test

import (
	"strings"
	"testing"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

func TestConformance(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	registrytest.Run(t, func(t *testing.T) registrytest.Backend {
		prefix := "/conformance/" + strings.ReplaceAll(t.Name(), "/", "_")
		return registrytest.Backend{
			NewRegistrar: func(t *testing.T) registry.Registrar {
				return newRegistrar(t, cli, reg(prefix)...)
			},
			Discovery: newDiscovery(t, cli, disc(prefix)...),
			Raw: func(t *testing.T, service string) []string {
				keys, _ := rawKeys(t, cli, registry.ServicePrefix(prefix, service))
				return keys
			},
		}
	})
}

// TestReadOnlyConformance runs the read-only cases too, publishing through
// a Registrar (each instance written only when it changed), so that the
// read-only suite is known to hold for the reference backend.
func TestReadOnlyConformance(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	registrytest.RunReadOnly(t, func(t *testing.T) registrytest.ReadOnlyBackend {
		prefix := "/conformance-ro/" + strings.ReplaceAll(t.Name(), "/", "_")
		r := newRegistrar(t, cli, reg(prefix)...)
		published := map[string]map[string]registry.Instance{}
		return registrytest.ReadOnlyBackend{
			Discovery: newDiscovery(t, cli, disc(prefix)...),
			Publish: func(t *testing.T, service string, ins ...registry.Instance) {
				old, next := published[service], map[string]registry.Instance{}
				for _, in := range ins {
					next[in.ID] = in
					if o, ok := old[in.ID]; ok && o.Equal(in) {
						continue
					}
					if err := r.Register(t.Context(), in); err != nil {
						t.Fatalf("Register %s: %v", in.ID, err)
					}
				}
				for id := range old {
					if _, ok := next[id]; !ok {
						if err := r.Deregister(t.Context(), service, id); err != nil {
							t.Fatalf("Deregister %s: %v", id, err)
						}
					}
				}
				published[service] = next
			},
		}
	})
}
