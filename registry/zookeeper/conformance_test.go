package zookeeper_test

import (
	"strings"
	"testing"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
)

func TestConformance(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "Standalone", 3: "Ensemble"}[n], func(t *testing.T) {
			c := zktest.Start(t, zktest.WithServers(n))
			raw := rawConn(t, c.DirectAddrs())
			registrytest.Run(t, func(t *testing.T) registrytest.Backend {
				root := "/conformance/" + strings.ReplaceAll(t.Name(), "/", "_")
				return registrytest.Backend{
					NewRegistrar: func(t *testing.T) registry.Registrar {
						return newRegistrar(t, c.Addrs(), fast(root)...)
					},
					Discovery: newDiscovery(t, c.Addrs(), fast(root)...),
					Raw: func(t *testing.T, service string) []string {
						ids, _ := rawNodes(t, raw, root, service)
						return ids
					},
				}
			})
		})
	}
}
