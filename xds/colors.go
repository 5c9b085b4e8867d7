package xds

import (
	"math"
	"slices"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/registry"
)

// Colors over xDS (docs/XDS.md, "Colors"). A service with colored
// instances (metadata color.DefaultInstanceKey) gets, beside its base
// Cluster S (now its uncolored instances only), a Cluster and an assignment
// "S~<color>" per color: that color's instances taking calls first, then the
// base as failover priorities, which is the balancers' non-strict fallback.
// Its RouteConfiguration sends a call whose x-muster-color header names a
// color to that color's cluster, and other calls to the base, or, under a
// canary setting, to weighted clusters. A service without colors is
// published exactly as before.

// colorSep joins a service and a color in a cluster name. Service names
// cannot contain it (registry.ValidateName), so no service's name is
// another's colored cluster.
const colorSep = "~"

// fallbackSubZone is the sub_zone of the base's localities in a color's
// assignment, where they follow the color's own at later priorities: a
// locality appears once per assignment across all priorities, since
// grpc-java keys a priority's endpoints by locality alone and checks
// duplicates within a priority only, so a base copy with the color's
// {region, zone} would silently replace the color's endpoints (its calls
// would reach the base). Instance localities never have a sub_zone.
const fallbackSubZone = "muster-base"

// canaryScale is the total weight of a canary route's weighted clusters:
// percents with two decimals.
const canaryScale = 10000

// colorCluster returns the name of the Cluster (and assignment) of a
// service's color.
func colorCluster(service, c string) string { return service + colorSep + c }

// coloring is what a service's routes depend on: its colors, sorted, its
// canary setting (zero for none), whether its routes carry the affinity
// hash policy (its policy is RingHash), and the route parts of its call
// policy (routeParts; zero for none).
type coloring struct {
	colors []string
	canary registry.Canary
	hash   bool
	call   registry.Policy
}

// equal reports whether a and b give the same routes.
func (a coloring) equal(b coloring) bool {
	return slices.Equal(a.colors, b.colors) && a.hash == b.hash && a.canaryWeight() == b.canaryWeight() &&
		(a.canaryWeight() == 0 || a.canary.Color == b.canary.Color) && samePolicy(a.call, b.call)
}

// canaryWeight returns the canary color's weight out of canaryScale, 0
// when the canary does not apply: no setting, a zero share, or a color
// with no instance (the balancers ignore such a canary too).
func (a coloring) canaryWeight() uint32 {
	if a.canary.Color == "" || !slices.Contains(a.colors, a.canary.Color) {
		return 0
	}
	return uint32(math.Round(a.canary.Percent * canaryScale / 100))
}

// clusterNames returns the names of a service's clusters (and
// assignments) for its colors: the base's, then one per color.
func clusterNames(service string, colors []string) []string {
	out := []string{service}
	for _, c := range colors {
		out = append(out, colorCluster(service, c))
	}
	return out
}

// colorsOf returns the distinct colors of list's instances, sorted; nil
// when every instance is of the base.
func colorsOf(list []registry.Instance) []string {
	var out []string
	for _, in := range list {
		if c := in.Metadata[color.DefaultInstanceKey]; c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// ofColor returns list's instances of color c ("" for the base).
func ofColor(list []registry.Instance, c string) []registry.Instance {
	out := make([]registry.Instance, 0, len(list))
	for _, in := range list {
		if in.Metadata[color.DefaultInstanceKey] == c {
			out = append(out, in)
		}
	}
	return out
}

// takingCalls returns list's instances that take calls (not draining).
func takingCalls(list []registry.Instance) []registry.Instance {
	out := make([]registry.Instance, 0, len(list))
	for _, in := range list {
		if in.EffectiveWeight() > 0 {
			out = append(out, in)
		}
	}
	return out
}

// assignments returns every assignment of a service for clients of v,
// by name, built by build (assignment or a wire form of it): for a service
// without colors its one assignment of every instance, as always; with
// colors, the base's (uncolored instances) and one per color, whose
// instances taking calls come first (priorities by zone as usual) and the
// base's after them, with priorities shifted so that they stay contiguous
// and sub_zone fallbackSubZone, so that no locality appears twice.
// A color none of whose instances takes calls is the base alone.
func assignments(service string, list []registry.Instance, v view,
	build func(name string, list []registry.Instance, v view) *endpointv3.ClusterLoadAssignment) map[string]*endpointv3.ClusterLoadAssignment {
	colors := colorsOf(list)
	if len(colors) == 0 {
		return map[string]*endpointv3.ClusterLoadAssignment{service: build(service, list, v)}
	}
	base := ofColor(list, "")
	out := make(map[string]*endpointv3.ClusterLoadAssignment, 1+len(colors))
	out[service] = build(service, base, v)
	for _, c := range colors {
		name := colorCluster(service, c)
		own := takingCalls(ofColor(list, c))
		fallback := build(name, base, v)
		if len(own) == 0 {
			out[name] = fallback
			continue
		}
		cla := build(name, own, v)
		var shift uint32
		for _, loc := range cla.Endpoints {
			shift = max(shift, loc.Priority+1)
		}
		for _, loc := range fallback.Endpoints {
			loc.Priority += shift
			loc.Locality.SubZone = fallbackSubZone
			cla.Endpoints = append(cla.Endpoints, loc)
		}
		out[name] = cla
	}
	return out
}

// routeWithColors returns the RouteConfiguration of service for co: every
// host, every path, to the cluster named service; with colors, a call
// whose color header names one of co's colors goes to that color's
// cluster; under a canary, a call with another color goes to the base and
// an uncolored call to weighted clusters (the base and the canary's color).
// With co.hash, every route hashes calls by the affinity header, else by
// channel (hashPolicies).
//
// The forms are the ones every client at the support floor accepts: the
// color header is matched by exact_match (string_match is rejected by the
// C-core before 1.56, grpc-java before 1.53 and grpc-go before 1.56, and a
// RouteConfiguration with it is rejected whole), and weighted clusters
// state their total_weight (older C-core and grpc-go take an absent total
// as 100 and reject another sum; grpc-js-xds before 1.14.1 draws over
// 0..total_weight, 100 when absent).
func routeWithColors(service string, co coloring) *routev3.RouteConfiguration {
	var routes []*routev3.Route
	for _, c := range co.colors {
		//lint:ignore SA1019 exact_match is deprecated, and the one form every client at the floor accepts (see above)
		m := &routev3.HeaderMatcher_ExactMatch{ExactMatch: c}
		routes = append(routes, headerRoute(&routev3.HeaderMatcher{Name: color.Header, HeaderMatchSpecifier: m},
			routeTo(colorCluster(service, c), co)))
	}
	def := routeTo(service, co)
	if w := co.canaryWeight(); w > 0 {
		// A colored call whose color has no cluster goes to the base, as
		// in the balancers: the canary takes a share of uncolored calls only.
		routes = append(routes, headerRoute(&routev3.HeaderMatcher{Name: color.Header,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}, routeTo(service, co)))
		// Clients leave out a cluster of weight 0 (a canary of 100%); the
		// total is always canaryScale.
		def.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
			Clusters: []*routev3.WeightedCluster_ClusterWeight{
				{Name: service, Weight: wrapperspb.UInt32(canaryScale - w)},
				{Name: colorCluster(service, co.canary.Color), Weight: wrapperspb.UInt32(w)},
			},
			//lint:ignore SA1019 deprecated, and what older clients need (see above)
			TotalWeight: wrapperspb.UInt32(canaryScale),
		}}
	}
	routes = append(routes, &routev3.Route{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: def},
	})
	return &routev3.RouteConfiguration{
		Name: service,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    service,
			Domains: []string{"*"},
			Routes:  routes,
		}},
	}
}

// routeTo is the action of a route to cluster, hashing calls for ring hash
// when co.hash is set, with the route parts of co.call.
func routeTo(cluster string, co coloring) *routev3.RouteAction {
	a := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}
	if co.hash {
		a.HashPolicy = hashPolicies(co.call.Affinity())
	}
	applyRoutePolicy(a, co.call)
	return a
}

// hashPolicies are the hash policies of a RingHash service's routes
// (gRFC A42): the affinity header (color.KeyHeader unless the service's
// call policy names another) when a call has it,
// otherwise the channel (filter state io.grpc.channel_id), so that every
// call of a channel without a key reaches one backend instead of a random
// one per call. The header's policy is terminal: a client combines the
// hashes of every policy that applies, and grpc-js-xds (1.10 to 1.14 at
// least) combines them into a value past 64 bits that lands on the ring's
// first entry half the time (one backend got two thirds of three).
func hashPolicies(header string) []*routev3.RouteAction_HashPolicy {
	return []*routev3.RouteAction_HashPolicy{
		{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{
			HeaderName: header}}, Terminal: true},
		{PolicySpecifier: &routev3.RouteAction_HashPolicy_FilterState_{FilterState: &routev3.RouteAction_HashPolicy_FilterState{
			Key: "io.grpc.channel_id"}}},
	}
}

// headerRoute is a route of every path whose headers match m, to action.
func headerRoute(m *routev3.HeaderMatcher, action *routev3.RouteAction) *routev3.Route {
	return &routev3.Route{
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
			Headers:       []*routev3.HeaderMatcher{m},
		},
		Action: &routev3.Route_Route{Route: action},
	}
}
