package lb

import (
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// Weight returns an endpoint's weight: its instance's EffectiveWeight when
// the Muster resolver made it (0 for a draining instance), else
// registry.DefaultWeight (100), e.g. for endpoints of other resolvers.
func Weight(ep grpcresolver.Endpoint) int {
	if in, ok := resolver.InstanceOf(ep); ok {
		return in.EffectiveWeight()
	}
	return registry.DefaultWeight
}
