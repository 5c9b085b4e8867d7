package resolver

import (
	"google.golang.org/grpc/attributes"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
)

// instanceKey is the attribute key under which an endpoint carries its
// instance.
type instanceKey struct{}

// instanceAttr makes an Instance a comparable attribute value.
type instanceAttr struct{ in registry.Instance }

// Equal lets grpc compare attribute sets (attributes.Attributes.Equal).
func (a instanceAttr) Equal(o any) bool {
	b, ok := o.(instanceAttr)
	return ok && a.in.Equal(b.in)
}

// InstanceOf returns the registry instance an endpoint was resolved from,
// for balancers and interceptors that weigh or filter by zone, version,
// weight or metadata. ok is false for an endpoint not made by this package.
func InstanceOf(ep grpcresolver.Endpoint) (in registry.Instance, ok bool) {
	a, ok := ep.Attributes.Value(instanceKey{}).(instanceAttr)
	return a.in, ok
}

// endpointOf builds the endpoint for an instance.
func endpointOf(in registry.Instance) grpcresolver.Endpoint {
	return grpcresolver.Endpoint{
		Addresses:  []grpcresolver.Address{{Addr: in.Addr}},
		Attributes: attributes.New(instanceKey{}, instanceAttr{in: in}),
	}
}
