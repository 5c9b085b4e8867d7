package xdscheck

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func u32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func endpoint(ip string, port uint32, w uint32) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}},
		HealthStatus:        corev3.HealthStatus_HEALTHY,
		LoadBalancingWeight: u32(w),
	}
}

func locality(region, zone, subZone string, prio uint32, eps ...*endpointv3.LbEndpoint) *endpointv3.LocalityLbEndpoints {
	var sum uint32
	for _, ep := range eps {
		sum += ep.GetLoadBalancingWeight().GetValue()
	}
	return &endpointv3.LocalityLbEndpoints{
		Locality:            &corev3.Locality{Region: region, Zone: zone, SubZone: subZone},
		LoadBalancingWeight: u32(max(sum, 1)),
		Priority:            prio,
		LbEndpoints:         eps,
	}
}

// good returns one valid resource of each type, as Muster publishes them.
func good(t *testing.T) (*listenerv3.Listener, *routev3.RouteConfiguration, *clusterv3.Cluster, *endpointv3.ClusterLoadAssignment) {
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
	hcm := &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "svc", ConfigSource: ads}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}}},
	}
	l := &listenerv3.Listener{Name: "svc", ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(t, hcm)}}
	action := &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
			Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "svc", Weight: u32(8000)}, {Name: "svc~blue", Weight: u32(2000)}},
			//lint:ignore SA1019 what older clients read
			TotalWeight: u32(10000),
		}},
		RetryPolicy: &routev3.RetryPolicy{RetryOn: "unavailable,cancelled", NumRetries: u32(2),
			RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(1e8), MaxInterval: durationpb.New(9e8)}},
	}
	rc := &routev3.RouteConfiguration{Name: "svc", VirtualHosts: []*routev3.VirtualHost{{Name: "svc", Domains: []string{"*"},
		Routes: []*routev3.Route{
			{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
				//lint:ignore SA1019 the form every client at the floor accepts
				Headers: []*routev3.HeaderMatcher{{Name: "x-muster-color", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "blue"}}}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "svc~blue"}}}},
			{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}, Action: &routev3.Route_Route{Route: action}},
		}}}}
	rr := &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{TypedExtensionConfig: &corev3.TypedExtensionConfig{
		Name: "round_robin", TypedConfig: mustAny(t, &roundrobinv3.RoundRobin{})}}}}
	c := &clusterv3.Cluster{
		Name:                 "svc",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads, ServiceName: "svc"},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		LoadBalancingPolicy: &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{
			{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: "ring_hash",
				TypedConfig: mustAny(t, &ringhashv3.RingHash{HashFunction: ringhashv3.RingHash_XX_HASH})}},
			{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: "wrr_locality",
				TypedConfig: mustAny(t, &wrrlocalityv3.WrrLocality{EndpointPickingPolicy: rr})}},
		}},
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{MaxRequests: u32(100)}}},
		OutlierDetection: &clusterv3.OutlierDetection{
			FailurePercentageThreshold:    u32(100),
			EnforcingFailurePercentage:    u32(100),
			FailurePercentageMinimumHosts: u32(math.MaxInt32),
			EnforcingSuccessRate:          u32(0),
		},
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: "svc~blue", Endpoints: []*endpointv3.LocalityLbEndpoints{
		locality("r1", "z1", "", 0, endpoint("10.0.0.1", 80, 100)),
		locality("r1", "z2", "", 1, endpoint("10.0.0.2", 80, 100)),
		locality("r1", "z1", "muster-base", 2, endpoint("10.0.0.3", 80, 100)),
		locality("r1", "z2", "muster-base", 3, endpoint("10.0.0.4", 80, 100)),
	}}
	return l, rc, c, cla
}

// ids returns the rule IDs of vs, sorted.
func ids(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Rule.ID)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// The resources Muster publishes meet every precondition.
func TestGoodResourcesPass(t *testing.T) {
	l, rc, c, cla := good(t)
	for _, res := range []proto.Message{l, rc, c, cla} {
		if vs := Check(res); len(vs) > 0 {
			t.Errorf("%T: %v", res, vs)
		}
	}
}

// The two faults grpc-java met: an outlier_detection whose minimum hosts
// is the uint32 maximum (a Java int of -1, a channel panic), and a color
// assignment whose base copies repeat the color's localities at later
// priorities (Java keeps the later copy's endpoints).
func TestJavaFaults(t *testing.T) {
	_, _, c, cla := good(t)
	c.OutlierDetection.FailurePercentageMinimumHosts = u32(math.MaxUint32)
	vs := Check(c)
	if got := ids(vs); !slices.Equal(got, []string{"java-int"}) {
		t.Fatalf("minimum hosts 4294967295: %v, want java-int", vs)
	}
	if !strings.Contains(vs[0].Error(), "outlier_detection.failure_percentage_minimum_hosts.value = 4294967295") {
		t.Errorf("the violation does not name the field and its value: %v", vs[0])
	}
	for _, l := range cla.Endpoints {
		l.Locality.SubZone = "" // the base's copies as the color's localities
	}
	vs = Check(cla)
	if got := ids(vs); !slices.Equal(got, []string{"locality-once"}) || len(vs) != 2 {
		t.Fatalf("a color assignment repeating its localities: %v, want two locality-once", vs)
	}
	if !strings.Contains(vs[0].Error(), `locality {region "r1", zone "z1", sub_zone ""} at priorities 0 and 2`) {
		t.Errorf("the violation does not name the locality and its priorities: %v", vs[0])
	}
}

// Each rule catches what it states, and only its own rule fires.
func TestEachRule(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		break_ func(l *listenerv3.Listener, rc *routev3.RouteConfiguration, c *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) proto.Message
	}{
		{"priorities-contiguous", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) proto.Message {
			cla.Endpoints[3].Priority = 5
			return cla
		}},
		{"weights", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) proto.Message {
			cla.Endpoints[0].LoadBalancingWeight = u32(0)
			return cla
		}},
		{"weights", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) proto.Message {
			cla.Endpoints[0].LbEndpoints[0].LoadBalancingWeight = u32(0)
			return cla
		}},
		{"weights", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) proto.Message {
			cla.Endpoints[0].LoadBalancingWeight = u32(math.MaxInt32)
			cla.Endpoints = append(cla.Endpoints, locality("r1", "z9", "", 0, endpoint("10.0.0.9", 80, 1)))
			cla.Endpoints[len(cla.Endpoints)-1].LoadBalancingWeight = u32(math.MaxInt32)
			cla.Endpoints = append(cla.Endpoints, locality("r1", "z8", "", 0, endpoint("10.0.0.8", 80, 1)))
			cla.Endpoints[len(cla.Endpoints)-1].LoadBalancingWeight = u32(math.MaxInt32)
			return cla
		}},
		{"addresses", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) proto.Message {
			cla.Endpoints[1].LbEndpoints[0] = endpoint("10.0.0.1", 80, 100)
			return cla
		}},
		{"addresses", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) proto.Message {
			cla.Endpoints[1].LbEndpoints[0] = endpoint("user.example", 80, 100)
			return cla
		}},
		{"health", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) proto.Message {
			cla.Endpoints[1].LbEndpoints[0].HealthStatus = corev3.HealthStatus_DEGRADED
			return cla
		}},
		{"router-filter", func(l *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			l.ApiListener.ApiListener = mustAny(t, &hcmv3.HttpConnectionManager{})
			return l
		}},
		{"header-match", func(_ *listenerv3.Listener, rc *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			rc.VirtualHosts[0].Routes[0].Match.Headers[0].HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{}
			return rc
		}},
		{"weighted-total", func(_ *listenerv3.Listener, rc *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			//lint:ignore SA1019 what older clients read
			rc.VirtualHosts[0].Routes[1].GetRoute().GetWeightedClusters().TotalWeight = nil
			return rc
		}},
		{"weighted-total", func(_ *listenerv3.Listener, rc *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			rc.VirtualHosts[0].Routes[1].GetRoute().GetWeightedClusters().Clusters[0].Weight = u32(1)
			return rc
		}},
		{"retry", func(_ *listenerv3.Listener, rc *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			rc.VirtualHosts[0].Routes[1].GetRoute().RetryPolicy.RetryBackOff.BaseInterval = durationpb.New(0)
			return rc
		}},
		{"retry", func(_ *listenerv3.Listener, rc *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			rc.VirtualHosts[0].Routes[1].GetRoute().RetryPolicy.RetryOn = "5xx"
			return rc
		}},
		{"lb-policy", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, c *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
			return c
		}},
		{"lb-policies", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, c *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			c.LoadBalancingPolicy.Policies[0].TypedExtensionConfig.TypedConfig = mustAny(t, &ringhashv3.RingHash{
				HashFunction: ringhashv3.RingHash_XX_HASH, MinimumRingSize: wrapperspb.UInt64(1024)})
			return c
		}},
		{"lb-policies", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, c *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			c.LoadBalancingPolicy.Policies = c.LoadBalancingPolicy.Policies[:1] // no round robin to fall back on
			return c
		}},
		{"lb-policies", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, c *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			c.LoadBalancingPolicy.Policies[0].TypedExtensionConfig.TypedConfig = mustAny(t, &xdstypev3.TypedStruct{TypeUrl: "type.googleapis.com/muster_p2c"})
			return c
		}},
		{"eds-cluster", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, c *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			c.EdsClusterConfig.EdsConfig = &corev3.ConfigSource{}
			return c
		}},
		{"max-requests", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, c *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			c.CircuitBreakers.Thresholds[0].MaxRequests = u32(0)
			return c
		}},
		{"timeout-range", func(_ *listenerv3.Listener, rc *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			d := durationpb.New(500 * time.Microsecond)
			rc.VirtualHosts[0].Routes[1].GetRoute().MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: d, GrpcTimeoutHeaderMax: d}
			return rc
		}},
		{"retry", func(_ *listenerv3.Listener, rc *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			rc.VirtualHosts[0].Routes[1].GetRoute().RetryPolicy.NumRetries = u32(0)
			return rc
		}},
		{"js-backoff", func(_ *listenerv3.Listener, rc *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			rc.VirtualHosts[0].Routes[1].GetRoute().RetryPolicy.RetryBackOff.MaxInterval = durationpb.New(time.Second)
			return rc
		}},
		{"metadata-values", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) proto.Message {
			cla.Endpoints[0].LbEndpoints[0].Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				"muster": {Fields: map[string]*structpb.Value{"id": {}}}}}
			return cla
		}},
		{"router-filter", func(l *listenerv3.Listener, _ *routev3.RouteConfiguration, _ *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			l.ApiListener.ApiListener = mustAny(t, &hcmv3.HttpConnectionManager{
				RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{}},
				HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router",
					ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}}}})
			return l
		}},
		{"outlier-percent", func(_ *listenerv3.Listener, _ *routev3.RouteConfiguration, c *clusterv3.Cluster, _ *endpointv3.ClusterLoadAssignment) proto.Message {
			c.OutlierDetection.MaxEjectionPercent = u32(101)
			return c
		}},
	} {
		l, rc, c, cla := good(t)
		res := tc.break_(l, rc, c, cla)
		if got := ids(Check(res)); !slices.Equal(got, []string{tc.rule}) {
			t.Errorf("%s: %v, want %s only", tc.rule, Check(res), tc.rule)
		}
	}
}

// A rule binds only the families it names: a route meant for the C-core
// alone may carry a backoff grpc-js-xds would misread.
func TestCheckForAudience(t *testing.T) {
	_, rc, _, _ := good(t)
	rc.VirtualHosts[0].Routes[1].GetRoute().RetryPolicy.RetryBackOff.MaxInterval = durationpb.New(time.Second)
	if vs := CheckFor(rc, CCore|GRPCGo|GRPCJava); len(vs) != 0 {
		t.Errorf("for the C-core, grpc-go and grpc-java: %v, want none", vs)
	}
	if got := ids(CheckFor(rc, GRPCJS)); !slices.Equal(got, []string{"js-backoff"}) {
		t.Errorf("for grpc-js-xds: %v, want js-backoff", got)
	}
}

// An assignment whose endpoints are carried pre-serialised (as unknown
// fields, as the control plane sends them) is checked as decoded.
func TestPreserialisedEndpoints(t *testing.T) {
	_, _, _, cla := good(t)
	cla.Endpoints[1].LbEndpoints[0] = endpoint("10.0.0.1", 80, 100) // a duplicate address
	var raw []byte
	for _, l := range cla.Endpoints {
		for _, ep := range l.LbEndpoints {
			b, err := proto.Marshal(&endpointv3.LocalityLbEndpoints{LbEndpoints: []*endpointv3.LbEndpoint{ep}})
			if err != nil {
				t.Fatal(err)
			}
			raw = b
			l.LbEndpoints = nil
			l.ProtoReflect().SetUnknown(raw)
		}
	}
	if got := ids(Check(cla)); !slices.Equal(got, []string{"addresses"}) {
		t.Errorf("pre-serialised endpoints: %v, want the duplicate address found", Check(cla))
	}
}

// Every rule says what it requires, of whom, and cites the client code it
// comes from.
func TestRulesCiteTheirSources(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Rules() {
		if r.ID == "" || r.Clients == "" || r.Says == "" || r.Else == "" || len(r.Sources) == 0 {
			t.Errorf("rule %+v: want an ID, clients, the property, the consequence and sources", r)
		}
		if seen[r.ID] {
			t.Errorf("rule ID %s twice", r.ID)
		}
		seen[r.ID] = true
		for _, s := range r.Sources {
			if !strings.Contains(s, ":") || strings.Contains(s, "TBD") {
				t.Errorf("rule %s: source %q does not cite a file and line", r.ID, s)
			}
		}
	}
}
