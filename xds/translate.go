package xds

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/registry"
)

// The translation from a service's instances to xDS resources. Everything
// here is pure: no I/O, no clock, no shared state.

// LBPolicy is a cluster's load-balancing policy, as xDS clients know it.
type LBPolicy string

// The policies a Cluster can name. Every gRPC client at Muster's support
// floor (docs/XDS.md, "Clients") accepts every Cluster Muster publishes; a
// client that lacks a policy falls back to round robin. What each client
// does with endpoint weights differs (see docs/XDS.md).
const (
	// RoundRobin is lb_policy ROUND_ROBIN, the default.
	RoundRobin LBPolicy = "round_robin"
	// RingHash is ring_hash (xxHash, the clients' default ring sizes) in
	// the Cluster's load_balancing_policy, then round robin across
	// localities, with lb_policy ROUND_ROBIN: the C-core 1.51 (Debian
	// bookworm's grpcio) reads only lb_policy and crashes on its first call
	// through a RING_HASH cluster (grpc/grpc#31766), so it gets round robin;
	// grpc-js rejects a ring_hash config that states ring sizes. Its routes
	// carry a hash policy: the affinity header color.KeyHeader
	// (x-muster-key), else the channel, so that calls with one key (and
	// calls of one channel without a key) reach one backend. Each
	// priority's endpoints are sent in one locality, so that an endpoint's
	// share of the ring is its weight's share in every client (clients that
	// multiply locality by endpoint weight and clients that normalise both
	// agree).
	RingHash LBPolicy = "ring_hash"
	// LeastRequest is least_request (choice count 2) in the Cluster's
	// load_balancing_policy, then round robin across localities for the
	// clients without it (grpc-js, the C-core, grpc-go 1.60 unless
	// GRPC_EXPERIMENTAL_ENABLE_LEAST_REQUEST is set), with lb_policy
	// ROUND_ROBIN for the clients that read only lb_policy: the lb_policy
	// LEAST_REQUEST enum is rejected by grpc-js and the C-core. grpc-go's
	// least_request ignores locality weights.
	LeastRequest LBPolicy = "least_request"
	// MusterP2C names Muster's balancer muster_p2c (package
	// balancer/p2c): a Go client that imports that package balances the
	// service with it; other clients fall back to round robin. See
	// CustomLBPolicy. Unlike other custom policies, the balancer's config
	// carries the table of instance weights that are not the default
	// ("endpointWeights"), since the balancer cannot read the EDS weights.
	MusterP2C LBPolicy = "muster_p2c"
	// MusterWRR names Muster's balancer muster_wrr (package
	// balancer/wrr), as MusterP2C does muster_p2c.
	MusterWRR LBPolicy = "muster_wrr"
)

// CustomLBPolicy is a LBPolicy naming a gRPC balancer registered in the clients
// under name, such as MusterP2C. The Cluster carries it in
// load_balancing_policy as an xds.type.v3.TypedStruct whose type URL ends in
// name (what gRPC clients look up in their balancer registry), followed by
// round robin across localities (wrr_locality) for the clients that do not
// have it: gRPC takes the first policy it supports. The name must match
// [a-z][a-z0-9_.]{0,63}; a LBPolicy that is neither a built-in one nor a valid
// custom name is an error of New.
//
// The balancer's config is empty, except for MusterP2C and MusterWRR,
// whose config carries the weights (see MusterP2C).
//
// # Experimental
//
// The balancer gets the endpoints gRPC's xDS support hands it, whose
// weights, zones and metadata no module but grpc-go can read; Muster's
// balancers get the weights from their config instead (see docs/XDS.md).
func CustomLBPolicy(name string) LBPolicy { return LBPolicy(name) }

func (p LBPolicy) builtin() bool { return p == RoundRobin || p == RingHash || p == LeastRequest }

func (p LBPolicy) valid() bool { return p.builtin() || customName.MatchString(string(p)) }

// takesWeights reports whether the policy's balancer reads an
// endpointWeights table from its config: Muster's own balancers.
func (p LBPolicy) takesWeights() bool { return p == MusterP2C || p == MusterWRR }

// customName is what a custom policy's name must match.
var customName = regexp.MustCompile(`^[a-z][a-z0-9_.]{0,63}$`)

// typedStructPrefix prefixes a custom policy's name in its TypedStruct's
// type URL; gRPC takes the part after the last "/".
const typedStructPrefix = "type.googleapis.com/"

// MetadataKey is the filter-metadata key under which every endpoint carries
// its instance with WithEndpointMetadata: a struct with "id", "version",
// "zone", "region" (when set), "weight" and "metadata" (the instance's own
// string pairs).
const MetadataKey = "muster"

const routerFilterName = "envoy.filters.http.router"

// ads is the config source of every resource that names another one: the
// same ADS stream.
func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// listenerFor returns the Listener a client asks for with xds:///service:
// an API listener whose HTTP connection manager gets its routes by RDS over
// ADS, with the router as its only (and so last) HTTP filter.
func listenerFor(service string) (*listenerv3.Listener, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, fmt.Errorf("xds: listener %s: %w", service, err)
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    ads(),
			RouteConfigName: service,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       routerFilterName,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("xds: listener %s: %w", service, err)
	}
	return &listenerv3.Listener{
		Name:        service,
		ApiListener: &listenerv3.ApiListener{ApiListener: hcm},
	}, nil
}

// routeFor returns the RouteConfiguration named service of a service
// without colors: every host, every path, to the cluster named service.
func routeFor(service string) *routev3.RouteConfiguration {
	return routeWithColors(service, coloring{})
}

// clusterFor returns the Cluster named service: EDS over ADS, endpoints
// from the ClusterLoadAssignment named service, balanced by p. mc, the
// weights from weightTable and the slow start, is written into the config
// of a policy that takesWeights; other policies ignore it.
func clusterFor(service string, p LBPolicy, mc musterConfig) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 service,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig:   ads(),
			ServiceName: service,
		},
		LbPolicy: clusterv3.Cluster_ROUND_ROBIN,
	}
	switch p {
	case RingHash:
		c.LoadBalancingPolicy = withRoundRobinFallback(&corev3.TypedExtensionConfig{
			Name:        "envoy.load_balancing_policies.ring_hash",
			TypedConfig: mustAny(&ringhashv3.RingHash{HashFunction: ringhashv3.RingHash_XX_HASH}),
		})
	case LeastRequest:
		c.LoadBalancingPolicy = withRoundRobinFallback(&corev3.TypedExtensionConfig{
			Name:        "envoy.load_balancing_policies.least_request",
			TypedConfig: mustAny(&leastrequestv3.LeastRequest{ChoiceCount: wrapperspb.UInt32(2)}),
		})
	case RoundRobin:
	default:
		if !p.takesWeights() {
			mc = musterConfig{}
		}
		c.LoadBalancingPolicy = customPolicy(string(p), mc)
	}
	return c
}

// customPolicy is the load_balancing_policy of a custom policy: the named
// balancer, with a config that is empty or has only what mc carries (the
// endpointWeights table and the slowStart of Muster's balancers), then
// round robin within localities weighted by their weights, which is what
// lb_policy ROUND_ROBIN means to a gRPC client.
func customPolicy(name string, mc musterConfig) *clusterv3.LoadBalancingPolicy {
	config := &structpb.Struct{Fields: mc.fields()}
	custom := mustAny(&xdstypev3.TypedStruct{TypeUrl: typedStructPrefix + name, Value: config})
	return withRoundRobinFallback(&corev3.TypedExtensionConfig{Name: name, TypedConfig: custom})
}

// withRoundRobinFallback is a load_balancing_policy of first, then round
// robin within localities weighted by their weights (what lb_policy
// ROUND_ROBIN means to a gRPC client), which every client has: a client
// takes the first policy of the list that it supports.
func withRoundRobinFallback(first *corev3.TypedExtensionConfig) *clusterv3.LoadBalancingPolicy {
	fallback := mustAny(&wrrlocalityv3.WrrLocality{EndpointPickingPolicy: &clusterv3.LoadBalancingPolicy{
		Policies: []*clusterv3.LoadBalancingPolicy_Policy{{TypedExtensionConfig: &corev3.TypedExtensionConfig{
			Name:        "envoy.load_balancing_policies.round_robin",
			TypedConfig: mustAny(&roundrobinv3.RoundRobin{}),
		}}},
	}})
	return &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{
		{TypedExtensionConfig: first},
		{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: "envoy.load_balancing_policies.wrr_locality", TypedConfig: fallback}},
	}}
}

// endpointWeightsField is the field of Muster's balancer configs that maps
// an endpoint's address to its weight (balancer/internal/lb
// ParseEndpointWeights reads it).
const endpointWeightsField = "endpointWeights"

// weightTable returns the endpointWeights table of a service's instances,
// as prepare and withoutDuplicates return them: each instance's address (canonical, the form
// gRPC gives its endpoint: host:port from the EDS socket address) to its
// effective weight, for the instances taking calls whose weight is not
// registry.DefaultWeight, which the balancers give an address left out.
// Draining instances are left out too: they are sent as DRAINING, which
// clients give no calls. nil when every weight is the default.
func weightTable(list []registry.Instance) map[string]int {
	var table map[string]int
	for _, in := range list {
		if w := in.EffectiveWeight(); w != 0 && w != registry.DefaultWeight {
			if table == nil {
				table = map[string]int{}
			}
			table[in.Addr] = w
		}
	}
	return table
}

// mustAny wraps m, a message linked into the program, in an Any; that
// cannot fail.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic("xds: " + err.Error())
	}
	return a
}

// skipped is an instance left out of a ClusterLoadAssignment, and why.
type skipped struct {
	ID, Addr, Reason string
}

// preparedInstance is an instance with its address in canonical form, or
// why it cannot be an endpoint (reason not empty).
type preparedInstance struct {
	in     registry.Instance
	reason string
}

// prepare checks one instance alone: its address must be host:port with an
// IP address and a port 1..65535 (a DNS name is refused: grpc-js rejects a
// whole assignment with one, and so would every Node client of the
// service), in canonical form (canonicalAddr: what a client's endpoint will
// carry), and its color, if any, a value a client can send (headerValue):
// a route for another would match no call.
func prepare(in registry.Instance) *preparedInstance {
	key, err := canonicalAddr(in.Addr)
	if err != nil {
		return &preparedInstance{in: in, reason: err.Error()}
	}
	if c := in.Metadata[color.DefaultInstanceKey]; c != "" && !headerValue(c) {
		return &preparedInstance{in: in, reason: fmt.Sprintf("color %q cannot be a gRPC header value (printable ASCII, no space at either end)", c)}
	}
	in.Addr = key
	return &preparedInstance{in: in}
}

// withoutDuplicates returns the prepared instances that can be endpoints,
// in order, leaving out those of the address of an instance before them
// (xDS clients reject a whole assignment with a duplicate), and those that
// cannot, with why.
func withoutDuplicates(list []*preparedInstance) ([]registry.Instance, []skipped) {
	ok := make([]registry.Instance, 0, len(list))
	var bad []skipped
	seen := make(map[string]string, len(list))
	for _, p := range list {
		if p.reason != "" {
			bad = append(bad, skipped{ID: p.in.ID, Addr: p.in.Addr, Reason: p.reason})
			continue
		}
		if first, dup := seen[p.in.Addr]; dup {
			bad = append(bad, skipped{ID: p.in.ID, Addr: p.in.Addr,
				Reason: fmt.Sprintf("same address as instance %q", first)})
			continue
		}
		seen[p.in.Addr] = p.in.ID
		ok = append(ok, p.in)
	}
	return ok, bad
}

// headerValue reports whether v can be the value of a gRPC metadata entry
// that is not binary, as every client sends it: printable ASCII, with no
// space at either end (HTTP/2 field values cannot begin or end with one).
func headerValue(v string) bool {
	if v == "" || v[0] == ' ' || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// canonicalAddr checks addr and returns it in a form where two spellings of
// one address are equal (IPv6 compressed, IPv4-mapped unmapped).
func canonicalAddr(addr string) (string, error) {
	host, port, err := splitAddr(addr)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// splitAddr parses host:port where host is an IP address.
func splitAddr(addr string) (string, uint32, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("address %q: port must be 1..65535", addr)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: host is not an IP address (xDS clients such as grpc-js reject an endpoint with a DNS name)", addr)
	}
	if ip.Zone() != "" {
		return "", 0, fmt.Errorf("address %q: an IPv6 zone cannot be sent in xDS", addr)
	}
	return ip.Unmap().String(), uint32(port), nil
}

// view is what a service's assignments depend on besides its instances:
// the locality of the clients they are for (empty for clients without
// one), whether the service's policy is RingHash, and whether endpoints
// carry their instance (WithEndpointMetadata).
type view struct {
	region   string
	zone     string
	ringHash bool
	metadata bool
}

// locality is where instances run, or where a client runs: a region and a
// zone in it, either empty when unknown.
type locality struct {
	region, zone string
}

// level returns the level of instances in l for the clients of v:
// registry.Near, as Muster's balancers order them.
func (v view) level(l locality) registry.Nearness {
	return registry.Near(v.region, v.zone, l.region, l.zone)
}

// assignment returns the ClusterLoadAssignment named service for clients
// of v, from instances already checked by prepare and withoutDuplicates.
//
// One locality per region and zone (an instance without them is in the
// locality with an empty region or zone), weighted by the sum of its
// instances' weights (at least 1, since clients ignore a locality of
// weight 0). Priorities follow the levels of view.level: the client's
// zone first, then the rest of its region, then everything else. A level
// none of whose instances takes traffic (none there, or all draining)
// joins the next one, and the priorities of the levels left are numbered
// from 0 without gaps (clients reject a gap): a client with no locality,
// or whose zone and region have no instance taking traffic, has every
// locality at priority 0. An endpoint's weight is its instance's weight; a
// draining instance is sent with weight 1 and health_status DRAINING,
// which clients give no calls.
//
// For RingHash, each priority's instances are one locality of weight 1
// (its zone, or its zones joined by "+", and its regions likewise): a
// ring hash client gives an endpoint a share of the ring by locality
// weight × endpoint weight (gRFC A42: grpc-java, the C-core, grpc-js,
// grpc-go 1.60) or by the product of the two normalised (grpc-go 1.85,
// gRFC A113); with one locality both are the endpoint weight's share, and
// the product cannot overflow.
func assignment(service string, list []registry.Instance, v view) *endpointv3.ClusterLoadAssignment {
	return assignmentWith(service, list, v, func(loc *endpointv3.LocalityLbEndpoints, ins []registry.Instance) {
		loc.LbEndpoints = make([]*endpointv3.LbEndpoint, 0, len(ins))
		for _, in := range ins {
			loc.LbEndpoints = append(loc.LbEndpoints, lbEndpoint(in, v.metadata))
		}
	})
}

// assignmentWith is assignment with the endpoints of each locality filled
// in by fill, given the locality's instances.
func assignmentWith(service string, list []registry.Instance, v view,
	fill func(*endpointv3.LocalityLbEndpoints, []registry.Instance)) *endpointv3.ClusterLoadAssignment {
	counts := map[locality]int{}
	var taking [registry.Elsewhere + 1]bool
	for _, in := range list {
		l := locality{in.Region, in.Zone}
		counts[l]++
		if in.EffectiveWeight() > 0 {
			taking[v.level(l)] = true
		}
	}
	byLocality := make(map[locality][]registry.Instance, len(counts))
	for l, n := range counts {
		byLocality[l] = make([]registry.Instance, 0, n)
	}
	for _, in := range list {
		l := locality{in.Region, in.Zone}
		byLocality[l] = append(byLocality[l], in)
	}
	localities := make([]locality, 0, len(byLocality))
	for l := range byLocality {
		localities = append(localities, l)
	}
	sort.Slice(localities, func(i, j int) bool {
		a, b := localities[i], localities[j]
		return a.region < b.region || a.region == b.region && a.zone < b.zone
	})
	priority := func(l locality) uint32 {
		lv := v.level(l)
		for lv < registry.Elsewhere && !taking[lv] {
			lv++ // a level taking no traffic joins the next
		}
		var p uint32
		for below := range lv {
			if taking[below] {
				p++
			}
		}
		return p
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: service}
	if v.ringHash {
		for prio := range uint32(registry.Elsewhere + 1) {
			var zones, regions []string
			var ins []registry.Instance
			for _, l := range localities {
				if priority(l) == prio {
					zones = append(zones, l.zone)
					if l.region != "" && !slices.Contains(regions, l.region) {
						regions = append(regions, l.region)
					}
					ins = append(ins, byLocality[l]...)
				}
			}
			if len(ins) == 0 {
				continue
			}
			loc := &endpointv3.LocalityLbEndpoints{
				Locality:            &corev3.Locality{Region: strings.Join(regions, "+"), Zone: strings.Join(zones, "+")},
				LoadBalancingWeight: wrapperspb.UInt32(1),
				Priority:            prio,
			}
			fill(loc, ins)
			cla.Endpoints = append(cla.Endpoints, loc)
		}
		return cla
	}
	for _, l := range localities {
		var sum uint32
		for _, in := range byLocality[l] {
			sum += uint32(in.EffectiveWeight())
		}
		loc := &endpointv3.LocalityLbEndpoints{
			Locality:            &corev3.Locality{Region: l.region, Zone: l.zone},
			LoadBalancingWeight: wrapperspb.UInt32(max(sum, 1)),
			Priority:            priority(l),
		}
		fill(loc, byLocality[l])
		cla.Endpoints = append(cla.Endpoints, loc)
	}
	return cla
}

// lbEndpoint is in's endpoint, carrying in under MetadataKey when metadata
// is set.
func lbEndpoint(in registry.Instance, metadata bool) *endpointv3.LbEndpoint {
	host, port, _ := splitAddr(in.Addr) // checked by prepare
	w := in.EffectiveWeight()
	health := corev3.HealthStatus_HEALTHY
	if w == 0 {
		w, health = 1, corev3.HealthStatus_DRAINING
	}
	ep := &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address:       host,
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
			}}},
		}},
		HealthStatus:        health,
		LoadBalancingWeight: wrapperspb.UInt32(uint32(w)),
	}
	if metadata {
		ep.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataKey: instanceStruct(in)}}
	}
	return ep
}

func instanceStruct(in registry.Instance) *structpb.Struct {
	md := make(map[string]*structpb.Value, len(in.Metadata))
	for k, v := range in.Metadata {
		md[k] = structpb.NewStringValue(v)
	}
	st := &structpb.Struct{Fields: map[string]*structpb.Value{
		"id":       structpb.NewStringValue(in.ID),
		"version":  structpb.NewStringValue(in.Version),
		"zone":     structpb.NewStringValue(in.Zone),
		"weight":   structpb.NewNumberValue(float64(in.EffectiveWeight())),
		"metadata": structpb.NewStructValue(&structpb.Struct{Fields: md}),
	}}
	if in.Region != "" {
		st.Fields["region"] = structpb.NewStringValue(in.Region)
	}
	return st
}
