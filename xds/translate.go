package xds

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strconv"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/musterhq/muster/registry"
)

// The translation from a service's instances to xDS resources. Everything
// here is pure: no I/O, no clock, no shared state.

// Policy is a cluster's load-balancing policy, as xDS clients know it.
type Policy string

// The policies a Cluster can name. gRPC clients implement all three; what
// each does with endpoint weights differs (see docs/XDS.md): grpc-go's
// round_robin and least_request ignore them, ring_hash honours them.
const (
	// RoundRobin is lb_policy ROUND_ROBIN, the default.
	RoundRobin Policy = "round_robin"
	// RingHash is lb_policy RING_HASH with a minimum ring of 4,096
	// entries (xxHash). Without a hash policy on the route, gRPC clients
	// hash each call at random, so calls spread by endpoint weight.
	RingHash Policy = "ring_hash"
	// LeastRequest is lb_policy LEAST_REQUEST.
	LeastRequest Policy = "least_request"
	// MusterP2C names Muster's balancer muster_p2c (package
	// balancer/p2c): a Go client that imports that package balances the
	// service with it; other clients fall back to round robin. See
	// CustomPolicy. Unlike other custom policies, the balancer's config
	// carries the table of instance weights that are not the default
	// ("endpointWeights"), since the balancer cannot read the EDS weights.
	MusterP2C Policy = "muster_p2c"
	// MusterWRR names Muster's balancer muster_wrr (package
	// balancer/wrr), as MusterP2C does muster_p2c.
	MusterWRR Policy = "muster_wrr"
)

// CustomPolicy is a Policy naming a gRPC balancer registered in the clients
// under name, such as MusterP2C. The Cluster carries it in
// load_balancing_policy as an xds.type.v3.TypedStruct whose type URL ends in
// name (what gRPC clients look up in their balancer registry), followed by
// round robin across localities (wrr_locality) for the clients that do not
// have it: gRPC takes the first policy it supports. The name must match
// [a-z][a-z0-9_.]{0,63}; a Policy that is neither a built-in one nor a valid
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
func CustomPolicy(name string) Policy { return Policy(name) }

func (p Policy) builtin() bool { return p == RoundRobin || p == RingHash || p == LeastRequest }

func (p Policy) valid() bool { return p.builtin() || customName.MatchString(string(p)) }

// takesWeights reports whether the policy's balancer reads an
// endpointWeights table from its config: Muster's own balancers.
func (p Policy) takesWeights() bool { return p == MusterP2C || p == MusterWRR }

// customName is what a custom policy's name must match.
var customName = regexp.MustCompile(`^[a-z][a-z0-9_.]{0,63}$`)

// typedStructPrefix prefixes a custom policy's name in its TypedStruct's
// type URL; gRPC takes the part after the last "/".
const typedStructPrefix = "type.googleapis.com/"

// MetadataKey is the filter-metadata key under which every endpoint carries
// its instance: a struct with "id", "version", "zone", "weight" and
// "metadata" (the instance's own string pairs).
const MetadataKey = "muster"

// ringSize is the minimum ring of RingHash clusters: gRPC's cap (4,096),
// so that each endpoint's share of the hash space is close to its share of
// the weight.
const ringSize = 4096

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

// routeFor returns the RouteConfiguration named service: every host, every
// path, to the cluster named service.
func routeFor(service string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: service,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    service,
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: service},
				}},
			}},
		}},
	}
}

// clusterFor returns the Cluster named service: EDS over ADS, endpoints
// from the ClusterLoadAssignment named service, balanced by p. weights,
// from weightTable, is written into the config of a policy that
// takesWeights; other policies ignore it.
func clusterFor(service string, p Policy, weights map[string]int) *clusterv3.Cluster {
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
		c.LbPolicy = clusterv3.Cluster_RING_HASH
		c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{
			MinimumRingSize: wrapperspb.UInt64(ringSize),
			HashFunction:    clusterv3.Cluster_RingHashLbConfig_XX_HASH,
		}}
	case LeastRequest:
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	case RoundRobin:
	default:
		if !p.takesWeights() {
			weights = nil
		}
		c.LoadBalancingPolicy = customPolicy(string(p), weights)
	}
	return c
}

// customPolicy is the load_balancing_policy of a custom policy: the named
// balancer, with a config that is empty or has only the endpointWeights
// table weights (when it is not empty), then round robin within localities
// weighted by their weights, which is what lb_policy ROUND_ROBIN means to a
// gRPC client.
func customPolicy(name string, weights map[string]int) *clusterv3.LoadBalancingPolicy {
	config := &structpb.Struct{}
	if len(weights) > 0 {
		table := make(map[string]*structpb.Value, len(weights))
		for addr, w := range weights {
			table[addr] = structpb.NewNumberValue(float64(w))
		}
		config.Fields = map[string]*structpb.Value{
			endpointWeightsField: structpb.NewStructValue(&structpb.Struct{Fields: table}),
		}
	}
	custom := mustAny(&xdstypev3.TypedStruct{TypeUrl: typedStructPrefix + name, Value: config})
	fallback := mustAny(&wrrlocalityv3.WrrLocality{EndpointPickingPolicy: &clusterv3.LoadBalancingPolicy{
		Policies: []*clusterv3.LoadBalancingPolicy_Policy{{TypedExtensionConfig: &corev3.TypedExtensionConfig{
			Name:        "envoy.load_balancing_policies.round_robin",
			TypedConfig: mustAny(&roundrobinv3.RoundRobin{}),
		}}},
	}})
	return &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{
		{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: custom}},
		{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: "envoy.load_balancing_policies.wrr_locality", TypedConfig: fallback}},
	}}
}

// endpointWeightsField is the field of Muster's balancer configs that maps
// an endpoint's address to its weight (balancer/internal/lb
// ParseEndpointWeights reads it).
const endpointWeightsField = "endpointWeights"

// weightTable returns the endpointWeights table of a service's instances,
// as usable returns them: each instance's address (canonical, the form
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

// usable returns the instances that can be xDS endpoints, in list's order,
// with their addresses in canonical form (canonicalAddr: what a client's
// endpoint will carry), and those that cannot: an address that is not
// host:port with an IP or a DNS name and a port 1..65535, or the same
// address as an instance before it in list (xDS clients reject a whole
// assignment with a duplicate).
func usable(list []registry.Instance) ([]registry.Instance, []skipped) {
	ok := make([]registry.Instance, 0, len(list))
	var bad []skipped
	seen := make(map[string]string, len(list))
	for _, in := range list {
		key, err := canonicalAddr(in.Addr)
		if err != nil {
			bad = append(bad, skipped{ID: in.ID, Addr: in.Addr, Reason: err.Error()})
			continue
		}
		if first, dup := seen[key]; dup {
			bad = append(bad, skipped{ID: in.ID, Addr: in.Addr,
				Reason: fmt.Sprintf("same address as instance %q", first)})
			continue
		}
		seen[key] = in.ID
		in.Addr = key
		ok = append(ok, in)
	}
	return ok, bad
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

// splitAddr parses host:port where host is an IP address or a DNS name.
func splitAddr(addr string) (string, uint32, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("address %q: port must be 1..65535", addr)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", 0, fmt.Errorf("address %q: an IPv6 zone cannot be sent in xDS", addr)
		}
		return ip.Unmap().String(), uint32(port), nil
	}
	if !validHostname(host) {
		return "", 0, fmt.Errorf("address %q: host is neither an IP address nor a DNS name", addr)
	}
	return host, uint32(port), nil
}

// validHostname reports whether h is a DNS name: dot-separated labels of
// 1..63 letters, digits and hyphens, not starting or ending with a hyphen,
// at most registry.MaxHostLen bytes.
func validHostname(h string) bool {
	if h == "" || len(h) > registry.MaxHostLen {
		return false
	}
	label := 0
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c == '.':
			if label == 0 || h[i-1] == '-' {
				return false
			}
			label = 0
		case c == '-':
			if label == 0 {
				return false
			}
			label++
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			label++
		default:
			return false
		}
		if label > 63 {
			return false
		}
	}
	return h[len(h)-1] != '-'
}

// assignment returns the ClusterLoadAssignment named service for clients
// in clientZone, from instances already checked by usable.
//
// One locality per zone (an instance without a zone is in the locality
// with an empty zone), weighted by the sum of its instances' weights (at
// least 1, since clients ignore a locality of weight 0). A client's own
// zone is priority 0 and every other zone priority 1, while the client's
// zone has an instance taking traffic; otherwise, and for a client with no
// zone, every locality is priority 0. An endpoint's weight is its
// instance's weight; a draining instance is sent with weight 1 and
// health_status DRAINING, which clients give no calls.
func assignment(service string, list []registry.Instance, clientZone string) *endpointv3.ClusterLoadAssignment {
	return assignmentWith(service, list, clientZone, func(loc *endpointv3.LocalityLbEndpoints, ins []registry.Instance) {
		loc.LbEndpoints = make([]*endpointv3.LbEndpoint, 0, len(ins))
		for _, in := range ins {
			loc.LbEndpoints = append(loc.LbEndpoints, lbEndpoint(in))
		}
	})
}

// assignmentWith is assignment with the endpoints of each locality filled
// in by fill, given the locality's instances.
func assignmentWith(service string, list []registry.Instance, clientZone string,
	fill func(*endpointv3.LocalityLbEndpoints, []registry.Instance)) *endpointv3.ClusterLoadAssignment {
	byZone := map[string][]registry.Instance{}
	local := false
	for _, in := range list {
		byZone[in.Zone] = append(byZone[in.Zone], in)
		if clientZone != "" && in.Zone == clientZone && in.EffectiveWeight() > 0 {
			local = true
		}
	}
	zones := make([]string, 0, len(byZone))
	for z := range byZone {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: service}
	for _, z := range zones {
		var prio, sum uint32
		if local && z != clientZone {
			prio = 1
		}
		for _, in := range byZone[z] {
			sum += uint32(in.EffectiveWeight())
		}
		loc := &endpointv3.LocalityLbEndpoints{
			Locality:            &corev3.Locality{Zone: z},
			LoadBalancingWeight: wrapperspb.UInt32(max(sum, 1)),
			Priority:            prio,
		}
		fill(loc, byZone[z])
		cla.Endpoints = append(cla.Endpoints, loc)
	}
	return cla
}

func lbEndpoint(in registry.Instance) *endpointv3.LbEndpoint {
	host, port, _ := splitAddr(in.Addr) // checked by usable
	w := in.EffectiveWeight()
	health := corev3.HealthStatus_HEALTHY
	if w == 0 {
		w, health = 1, corev3.HealthStatus_DRAINING
	}
	return &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address:       host,
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
			}}},
		}},
		HealthStatus:        health,
		LoadBalancingWeight: wrapperspb.UInt32(uint32(w)),
		Metadata:            &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataKey: instanceStruct(in)}},
	}
}

func instanceStruct(in registry.Instance) *structpb.Struct {
	md := make(map[string]*structpb.Value, len(in.Metadata))
	for k, v := range in.Metadata {
		md[k] = structpb.NewStringValue(v)
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"id":       structpb.NewStringValue(in.ID),
		"version":  structpb.NewStringValue(in.Version),
		"zone":     structpb.NewStringValue(in.Zone),
		"weight":   structpb.NewNumberValue(float64(in.EffectiveWeight())),
		"metadata": structpb.NewStructValue(&structpb.Struct{Fields: md}),
	}}
}
