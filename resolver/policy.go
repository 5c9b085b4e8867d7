package resolver

import (
	"reflect"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
)

// WithPolicies makes the Builder follow each service's call policy in src
// (registry/etcd's Policies) and hand it with every state, as a state
// attribute that PolicyOf reads; a change pushes the same endpoints again
// with the new policy. Muster's xDS control plane publishes it to its
// clients (see docs/POLICY.md for what each client applies). nil (the
// default) follows none.
func WithPolicies(src registry.PolicySource) Option {
	return func(o *options) { o.policies = src }
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

// PolicyOf returns the call policy a state carries (see WithPolicies); ok
// is false when it carries none, or one that sets nothing.
func PolicyOf(s grpcresolver.State) (p registry.Policy, ok bool) {
	a, ok := s.Attributes.Value(policyKey{}).(policyAttr)
	return a.p, ok && !a.p.IsZero()
}
