// Package lbattr holds the attributes Muster's resolver writes on the
// states and endpoints it hands to gRPC and Muster's balancers read: an
// endpoint's registry instance, the client's locality, the service's canary
// setting and call policy. It sits below both, so that the resolver can
// depend on the balancers (it names muster_p2c as the channels' default)
// while the balancers read what the resolver wrote. The exported readers
// and writers are in package resolver (InstanceOf, LocalityOf, CanaryOf,
// PolicyOf, EndpointOf, StateWithLocality), which delegates here.
package lbattr

import (
	"reflect"
	"sync/atomic"

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

// InstanceOf returns the instance an endpoint carries; ok is false for an
// endpoint made elsewhere than by Endpoint.
func InstanceOf(ep grpcresolver.Endpoint) (in registry.Instance, ok bool) {
	a, ok := ep.Attributes.Value(instanceKey{}).(instanceAttr)
	if !ok {
		return registry.Instance{}, false
	}
	return *a.in, true
}

// InstanceOfAddress is InstanceOf for an address of such an endpoint.
func InstanceOfAddress(addr grpcresolver.Address) (in registry.Instance, ok bool) {
	//lint:ignore SA1019 balancers built on grpc's balancer/base (go-zero's, Kratos') see only addresses and read the instance from here.
	a, ok := addr.BalancerAttributes.Value(instanceKey{}).(instanceAttr)
	if !ok {
		return registry.Instance{}, false
	}
	return *a.in, true
}

// Endpoint returns the endpoint of in: one address, and in as an attribute
// of both. in is shared, not copied, and must not change afterwards.
func Endpoint(in *registry.Instance) grpcresolver.Endpoint {
	attr := attributes.New(instanceKey{}, instanceAttr{in: in})
	return grpcresolver.Endpoint{
		Addresses:  []grpcresolver.Address{{Addr: in.Addr, BalancerAttributes: attr}},
		Attributes: attr,
	}
}

// Locality is where a client runs: its region and its zone, either empty
// when unknown.
type Locality struct {
	Region, Zone string
}

// localityKey is the state attribute key of the client's locality.
type localityKey struct{}

// LocalityOf returns the locality a state carries; ok is false for none.
func LocalityOf(s grpcresolver.State) (l Locality, ok bool) {
	l, ok = s.Attributes.Value(localityKey{}).(Locality)
	return l, ok
}

// canaryKey is the state attribute key of the canary setting.
type canaryKey struct{}

// CanaryOf returns the canary setting a state carries; ok is false when it
// carries none or one of 0 %.
func CanaryOf(s grpcresolver.State) (c registry.Canary, ok bool) {
	c, ok = s.Attributes.Value(canaryKey{}).(registry.Canary)
	return c, ok && c.Color != "" && c.Percent > 0
}

// policyKey is the state attribute key of the call policy.
type policyKey struct{}

// policyAttr makes a Policy (which holds a slice) a comparable attribute
// value.
type policyAttr struct{ p registry.Policy }

// Equal lets grpc compare attribute sets.
func (a policyAttr) Equal(o any) bool {
	b, ok := o.(policyAttr)
	return ok && reflect.DeepEqual(a.p, b.p)
}

// PolicyOf returns the call policy a state carries; ok is false when it
// carries none, or one that sets nothing.
func PolicyOf(s grpcresolver.State) (p registry.Policy, ok bool) {
	a, ok := s.Attributes.Value(policyKey{}).(policyAttr)
	return a.p, ok && !a.p.IsZero()
}

// StateAttributes returns a, nil or not, carrying the canary setting c
// (when it names a color), the call policy p (when it sets something) and
// the locality l (when withLocality).
func StateAttributes(a *attributes.Attributes, c registry.Canary, p registry.Policy, l Locality, withLocality bool) *attributes.Attributes {
	if c.Color != "" {
		a = with(a, canaryKey{}, c)
	}
	if !p.IsZero() {
		a = with(a, policyKey{}, policyAttr{p})
	}
	if withLocality {
		a = with(a, localityKey{}, l)
	}
	return a
}

// with returns a, nil or not, with key set to v.
func with(a *attributes.Attributes, key, v any) *attributes.Attributes {
	if a == nil {
		return attributes.New(key, v)
	}
	return a.WithValue(key, v)
}

// Receipt tells the resolver whether the channel's balancer is one of
// Muster's: Muster's balancers sign the receipt a state carries when they
// receive it (Sign). gRPC hands a state to the balancer before
// ClientConn.UpdateState returns, so the resolver reads the receipt right
// after. The zero value is unsigned and ready to use.
type Receipt struct{ signed atomic.Bool }

// Signed reports whether one of Muster's balancers received a state
// carrying r.
func (r *Receipt) Signed() bool { return r.signed.Load() }

// receiptKey is the state attribute key of a Receipt.
type receiptKey struct{}

// WithReceipt returns a, nil or not, carrying r.
func WithReceipt(a *attributes.Attributes, r *Receipt) *attributes.Attributes {
	return with(a, receiptKey{}, r)
}

// Sign signs the receipt s carries, if any. Muster's balancers call it
// with every state they receive; it is cheap and safe for concurrent use.
func Sign(s grpcresolver.State) {
	if r, ok := s.Attributes.Value(receiptKey{}).(*Receipt); ok {
		r.signed.Store(true)
	}
}

// emptyKey is the state attribute key of the reason a state has no
// endpoint.
type emptyKey struct{}

// WithEmptyReason returns a, nil or not, carrying why the state has no
// endpoint: the service, where it was looked up, what the registry said.
// Muster's balancers fail calls with it.
func WithEmptyReason(a *attributes.Attributes, reason string) *attributes.Attributes {
	return with(a, emptyKey{}, reason)
}

// EmptyReasonOf returns the reason a state without endpoints carries; ok
// is false for none.
func EmptyReasonOf(s grpcresolver.State) (reason string, ok bool) {
	reason, ok = s.Attributes.Value(emptyKey{}).(string)
	return reason, ok && reason != ""
}
