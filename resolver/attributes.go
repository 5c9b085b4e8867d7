package resolver

import (
	"google.golang.org/grpc/attributes"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
)

// instanceKey is the attribute key under which an endpoint carries its
// instance.
type instanceKey struct{}

// instanceAttr makes an Instance a comparable attribute value. It holds
// the instance of the Discovery's snapshot, shared and read-only.
type instanceAttr struct{ in *registry.Instance }

// Equal lets grpc compare attribute sets (attributes.Attributes.Equal).
func (a instanceAttr) Equal(o any) bool {
	b, ok := o.(instanceAttr)
	return ok && (a.in == b.in || a.in.Equal(*b.in))
}

// InstanceOf returns the registry instance an endpoint was resolved from,
// for balancers and interceptors that weigh or filter by zone, version,
// weight or metadata. ok is false for an endpoint not made by this package.
func InstanceOf(ep grpcresolver.Endpoint) (in registry.Instance, ok bool) {
	a, ok := ep.Attributes.Value(instanceKey{}).(instanceAttr)
	if !ok {
		return registry.Instance{}, false
	}
	return *a.in, true
}

// InstanceOfAddress is InstanceOf for address-based balancers (those built
// on grpc's balancer/base), which see resolver.Address values.
func InstanceOfAddress(addr grpcresolver.Address) (in registry.Instance, ok bool) {
	//lint:ignore SA1019 balancers built on grpc's balancer/base (go-zero's, Kratos') see only addresses and read the instance from here.
	a, ok := addr.BalancerAttributes.Value(instanceKey{}).(instanceAttr)
	if !ok {
		return registry.Instance{}, false
	}
	return *a.in, true
}

// EndpointOf returns the endpoint the resolver makes for an instance: one
// address, and the instance as an attribute that InstanceOf reads. Use it to
// feed Muster balancers from another resolver (grpc's manual resolver in
// tests, a static list) with weights, zones and metadata.
func EndpointOf(in registry.Instance) grpcresolver.Endpoint {
	return endpointOf(&in)
}

// endpointOf is EndpointOf for an instance of a snapshot, shared without a
// copy.
func endpointOf(in *registry.Instance) grpcresolver.Endpoint {
	attr := attributes.New(instanceKey{}, instanceAttr{in: in})
	return grpcresolver.Endpoint{
		Addresses:  []grpcresolver.Address{{Addr: in.Addr, BalancerAttributes: attr}},
		Attributes: attr,
	}
}
