// Package xdscheck holds the preconditions that gRPC's xDS clients put on
// the resources they receive, and checks a resource against them.
//
// A precondition is a property a client's parser or balancer builder
// requires, read from that client's source at the support floor and at the
// newest version (docs/XDS.md, "Client preconditions"): an integer range as
// the client reads the field, a uniqueness key as the client keys its
// entries, a form the client accepts. A resource that breaks one is one
// that client rejects (a NACK, which costs it the whole service), misreads
// (calls sent where they should not go) or crashes on, even where that
// client cannot run in our tests (grpc-java, C++, Ruby, PHP). It is not a
// model of a client's behaviour: it says what must hold, not what the
// client does.
//
// Check is pure and safe for concurrent use. The xds package runs it on
// every resource it publishes with xds.WithSelfCheck (muster xds
// --self-check), which every test of the control plane turns on.
package xdscheck

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
)

// Family is a set of xDS client families.
type Family uint8

// The client families Muster supports (docs/XDS.md, "Clients").
const (
	GRPCGo   Family = 1 << iota // grpc-go
	GRPCJava                    // grpc-java
	CCore                       // the C-core: gRPC C++, Python, Ruby, PHP
	GRPCJS                      // @grpc/grpc-js-xds (Node)

	// AllClients is every family.
	AllClients = GRPCGo | GRPCJava | CCore | GRPCJS
)

// Rule is one precondition.
type Rule struct {
	// ID names the rule in violations and docs.
	ID string
	// Families are the client families that require it; Clients says
	// which (and from which versions) in words.
	Families Family
	Clients  string
	// Says is the property, as it must hold on a resource.
	Says string
	// Else is what a client does with a resource that breaks it.
	Else string
	// Sources cite the client code each requirement is read from: the
	// client, its version, the file and line.
	Sources []string

	check func(r resource) []string
}

// Violation is a resource breaking a Rule.
type Violation struct {
	Rule *Rule
	// Type is the resource's type ("Listener", "RouteConfiguration",
	// "Cluster", "ClusterLoadAssignment") and Name its name.
	Type, Name string
	// Detail says where the resource breaks the rule.
	Detail string
}

// Error says which resource breaks which rule, where, and what the
// clients that require it do otherwise; the rule's Sources say where
// that is read from.
func (v Violation) Error() string {
	return fmt.Sprintf("xds precondition %s: %s %q: %s (required by %s: %s; otherwise it would %s)",
		v.Rule.ID, v.Type, v.Name, v.Detail, v.Rule.Clients, v.Rule.Says, v.Rule.Else)
}

// resource is one resource of a type Check knows; exactly one field is set.
type resource struct {
	l   *listenerv3.Listener
	rc  *routev3.RouteConfiguration
	c   *clusterv3.Cluster
	cla *endpointv3.ClusterLoadAssignment
	msg proto.Message
}

// Check returns every violation by res of the preconditions of every
// client family: CheckFor(res, AllClients).
func Check(res proto.Message) []Violation { return CheckFor(res, AllClients) }

// CheckFor returns every violation of the preconditions of the client
// families of audience (those that get res) by res, a Listener,
// RouteConfiguration, Cluster or ClusterLoadAssignment (any other message
// is one violation that says so). A ClusterLoadAssignment whose endpoints
// are carried as unknown fields (pre-serialised) is read as a client
// would decode it.
func CheckFor(res proto.Message, audience Family) []Violation {
	r, typ, name := resource{msg: res}, "", ""
	switch m := res.(type) {
	case *listenerv3.Listener:
		r.l, typ, name = m, "Listener", m.GetName()
	case *routev3.RouteConfiguration:
		r.rc, typ, name = m, "RouteConfiguration", m.GetName()
	case *clusterv3.Cluster:
		r.c, typ, name = m, "Cluster", m.GetName()
	case *endpointv3.ClusterLoadAssignment:
		if len(m.ProtoReflect().GetUnknown()) > 0 || hasUnknown(m) {
			m = decoded(m)
		}
		r.cla, typ, name = m, "ClusterLoadAssignment", m.GetClusterName()
		r.msg = m
	default:
		return []Violation{{Rule: &unknownType, Type: fmt.Sprintf("%T", res), Detail: "not a resource type Muster publishes"}}
	}
	var out []Violation
	for i := range rules {
		if rules[i].Families&audience == 0 {
			continue
		}
		for _, d := range rules[i].check(r) {
			out = append(out, Violation{Rule: &rules[i], Type: typ, Name: name, Detail: d})
		}
	}
	return out
}

// Rules returns the preconditions Check checks, in order.
func Rules() []Rule { return append([]Rule(nil), rules...) }

var unknownType = Rule{ID: "known-type", Families: AllClients, Clients: "every client", Says: "the resource is a Listener, RouteConfiguration, Cluster or ClusterLoadAssignment",
	Else: "is not served it"}

// hasUnknown reports whether any locality of cla carries fields as
// unknown bytes.
func hasUnknown(cla *endpointv3.ClusterLoadAssignment) bool {
	for _, l := range cla.GetEndpoints() {
		if len(l.ProtoReflect().GetUnknown()) > 0 {
			return true
		}
	}
	return false
}

// decoded returns cla as a client decodes it: marshalled and read back,
// so that fields carried as unknown bytes become fields.
func decoded(cla *endpointv3.ClusterLoadAssignment) *endpointv3.ClusterLoadAssignment {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
	if err != nil {
		return cla
	}
	out := &endpointv3.ClusterLoadAssignment{}
	if err := proto.Unmarshal(b, out); err != nil {
		return cla
	}
	return out
}
