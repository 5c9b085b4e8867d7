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
				return newRegistrar(t, cli, fast(prefix)...)
			},
			Discovery: newDiscovery(t, cli, fast(prefix)...),
			Raw: func(t *testing.T, service string) []string {
				keys, _ := rawKeys(t, cli, registry.ServicePrefix(prefix, service))
				return keys
			},
		}
	})
}
