package xds

import (
	"math"
	"slices"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
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

// canaryScale is the total weight of a canary route's weighted clusters:
// percents with two decimals.
const canaryScale = 10000

// colorCluster returns the name of the Cluster (and assignment) of a
// service's color.
func colorCluster(service, c string) string { return service + colorSep + c }

// coloring is what a service's routes depend on: its colors, sorted, and
// its canary setting (zero for none).
type coloring struct {
	colors []string
	canary registry.Canary
}

// equal reports whether a and b give the same routes.
func (a coloring) equal(b coloring) bool {
	return slices.Equal(a.colors, b.colors) && a.canaryWeight() == b.canaryWeight() &&
		(a.canaryWeight() == 0 || a.canary.Color == b.canary.Color)
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

// assignments returns every assignment of a service for clients in zone,
// by name, built by build (assignment or a wire form of it): for a service
// without colors its one assignment of every instance, as always; with
// colors, the base's (uncolored instances) and one per color, whose
// instances taking calls come first (priorities by zone as usual) and the
// base's after them, with priorities shifted so that they stay contiguous.
// A color none of whose instances takes calls is the base alone.
func assignments(service string, list []registry.Instance, zone string,
	build func(name string, list []registry.Instance, zone string) *endpointv3.ClusterLoadAssignment) map[string]*endpointv3.ClusterLoadAssignment {
	colors := colorsOf(list)
	if len(colors) == 0 {
		return map[string]*endpointv3.ClusterLoadAssignment{service: build(service, list, zone)}
	}
	base := ofColor(list, "")
	out := make(map[string]*endpointv3.ClusterLoadAssignment, 1+len(colors))
	out[service] = build(service, base, zone)
	for _, c := range colors {
		name := colorCluster(service, c)
		own := takingCalls(ofColor(list, c))
		fallback := build(name, base, zone)
		if len(own) == 0 {
			out[name] = fallback
			continue
		}
		cla := build(name, own, zone)
		var shift uint32
		for _, loc := range cla.Endpoints {
			shift = max(shift, loc.Priority+1)
		}
		for _, loc := range fallback.Endpoints {
			loc.Priority += shift
			cla.Endpoints = append(cla.Endpoints, loc)
		}
		out[name] = cla
	}
	return out
}

// routeWithColors returns routeFor(service) with co's routes: a call whose
// color header names one of co's colors goes to that color's cluster; under
// a canary, a call with another color goes to the base and an uncolored call
// to weighted clusters (the base and the canary's color); every other call
// goes to the base. Without colors it is routeFor(service).
func routeWithColors(service string, co coloring) *routev3.RouteConfiguration {
	r := routeFor(service)
	if len(co.colors) == 0 {
		return r
	}
	vh := r.VirtualHosts[0]
	def := vh.Routes[0]
	var routes []*routev3.Route
	for _, c := range co.colors {
		routes = append(routes, headerRoute(&routev3.HeaderMatcher{Name: color.Header,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Exact{Exact: c}}}}, colorCluster(service, c)))
	}
	if w := co.canaryWeight(); w > 0 {
		// A colored call whose color has no cluster goes to the base, as
		// in the balancers: the canary takes a share of uncolored calls only.
		routes = append(routes, headerRoute(&routev3.HeaderMatcher{Name: color.Header,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}, service))
		// Clients leave out a cluster of weight 0 (a canary of 100%); the
		// total is always canaryScale.
		def.Action = &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
				Clusters: []*routev3.WeightedCluster_ClusterWeight{
					{Name: service, Weight: wrapperspb.UInt32(canaryScale - w)},
					{Name: colorCluster(service, co.canary.Color), Weight: wrapperspb.UInt32(w)},
				},
			}},
		}}
	}
	vh.Routes = append(routes, def)
	return r
}

// headerRoute is a route of every path whose headers match m, to cluster.
func headerRoute(m *routev3.HeaderMatcher, cluster string) *routev3.Route {
	return &routev3.Route{
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
			Headers:       []*routev3.HeaderMatcher{m},
		},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
		}},
	}
}
