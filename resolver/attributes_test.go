package resolver_test

import (
	"testing"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

func TestEndpointCarriesItsInstance(t *testing.T) {
	in := registry.Instance{Name: "user", ID: "a", Addr: "127.0.0.1:9", Zone: "z1", Weight: 250, Metadata: map[string]string{"k": "v"}}
	ep := resolver.EndpointOf(in)
	got, ok := resolver.InstanceOf(ep)
	if !ok || !got.Equal(in) {
		t.Fatalf("InstanceOf = %+v, %v; want %+v", got, ok, in)
	}
	got, ok = resolver.InstanceOfAddress(ep.Addresses[0])
	if !ok || !got.Equal(in) || ep.Addresses[0].Addr != in.Addr {
		t.Fatalf("InstanceOfAddress = %+v, %v", got, ok)
	}
	if !resolver.EndpointOf(in).Attributes.Equal(ep.Attributes) {
		t.Fatalf("equal instances give unequal attributes; gRPC would see a change")
	}
	in.Weight = 1
	if resolver.EndpointOf(in).Attributes.Equal(ep.Attributes) {
		t.Fatalf("a weight change is invisible in the attributes")
	}
	if _, ok := resolver.InstanceOf(grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: "x:1"}}}); ok {
		t.Fatalf("InstanceOf found an instance on a foreign endpoint")
	}
}
