package resolver

import (
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
)

// InstanceOf returns the registry instance an endpoint was resolved from,
// for balancers and interceptors that weigh or filter by zone, version,
// weight or metadata. ok is false for an endpoint not made by this package.
func InstanceOf(ep grpcresolver.Endpoint) (in registry.Instance, ok bool) {
	return lbattr.InstanceOf(ep)
}

// InstanceOfAddress is InstanceOf for address-based balancers (those built
// on grpc's balancer/base), which see resolver.Address values.
func InstanceOfAddress(addr grpcresolver.Address) (in registry.Instance, ok bool) {
	return lbattr.InstanceOfAddress(addr)
}

// EndpointOf returns the endpoint the resolver makes for an instance: one
// address, and the instance as an attribute that InstanceOf reads. Use it to
// feed Muster balancers from another resolver (grpc's manual resolver in
// tests, a static list) with weights, zones and metadata.
func EndpointOf(in registry.Instance) grpcresolver.Endpoint {
	return lbattr.Endpoint(&in)
}

// endpointOf is EndpointOf for an instance of a snapshot, shared without a
// copy.
func endpointOf(in *registry.Instance) grpcresolver.Endpoint {
	return lbattr.Endpoint(in)
}
