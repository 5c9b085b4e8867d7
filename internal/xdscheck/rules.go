package xdscheck

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The versions the sources are read at: the support floor and the newest
// (docs/XDS.md, "Clients"). Paths are within each client's repository
// (grpc-go: the module; grpc-js-xds: packages/grpc-js-xds, whose npm
// package ships src/).
const (
	go160, go185   = "grpc-go v1.60.1 ", "grpc-go v1.85.0 "
	java157, javaM = "grpc-java v1.57.2 ", "grpc-java master@5fda0c7c35a9 "
	js110, js114   = "@grpc/grpc-js-xds 1.10.1 ", "@grpc/grpc-js-xds 1.14.1 "
	core151, coreM = "grpc C-core v1.51.1 ", "grpc C-core master@f86ded18ea "
	// The xDS parsers moved between grpc-go's versions.
	goEDS160, goEDS185 = go160 + "xds/internal/xdsclient/xdsresource/unmarshal_eds.go", go185 + "internal/xds/xdsclient/xdsresource/unmarshal_eds.go"
	goCDS160, goCDS185 = go160 + "xds/internal/xdsclient/xdsresource/unmarshal_cds.go", go185 + "internal/xds/xdsclient/xdsresource/unmarshal_cds.go"
	goRDS160, goRDS185 = go160 + "xds/internal/xdsclient/xdsresource/unmarshal_rds.go", go185 + "internal/xds/xdsclient/xdsresource/unmarshal_rds.go"
	jsEDS110, jsEDS114 = js110 + "src/xds-resource-type/endpoint-resource-type.ts", js114 + "src/xds-resource-type/endpoint-resource-type.ts"
	jsCDS110, jsCDS114 = js110 + "src/xds-resource-type/cluster-resource-type.ts", js114 + "src/xds-resource-type/cluster-resource-type.ts"
	jsRDS110, jsRDS114 = js110 + "src/xds-resource-type/route-config-resource-type.ts", js114 + "src/xds-resource-type/route-config-resource-type.ts"
	javaXDS            = "xds/src/main/java/io/grpc/xds/"
	coreXDS            = "src/core/ext/xds/" // at 1.51.1
)

// rules are the preconditions, each with the client code it is read from.
var rules = []Rule{
	{
		ID:       "java-int",
		Families: GRPCJava,
		Clients:  "grpc-java",
		Says:     "every uint32 field is at most 2147483647 and every uint64 at most 9223372036854775807",
		Else: "read a uint32 into a Java int, so a larger value is negative: an outlier_detection failure_percentage_minimum_hosts or " +
			"request_volume passes its parser and throws in the balancer builder on the channel's sync context, a panic that fails every " +
			"call; a locality weight is dropped with its endpoints; circuit_breakers max_requests drops every call (before 1.70)",
		Sources: []string{
			java157 + javaXDS + "EnvoyServerProtoData.java:339-342 (read as int)",
			java157 + "core/src/main/java/io/grpc/util/OutlierDetectionLoadBalancer.java:1103-1106 (checkArgument(minimumHosts >= 0))",
			javaM + javaXDS + "EnvoyServerProtoData.java:407-410",
			javaM + "util/src/main/java/io/grpc/util/OutlierDetectionLoadBalancer.java:1137-1139",
			java157 + javaXDS + "XdsEndpointResource.java:174-177 (locality weight < 1: dropped)",
			java157 + javaXDS + "XdsClusterResource.java:186-196 (max_requests cast)",
		},
		check: func(r resource) []string { return javaIntRange(r.msg) },
	},
	{
		ID:       "locality-once",
		Families: AllClients,
		Clients:  "grpc-java (across priorities); grpc-go, grpc-js-xds, C-core (within a priority); grpc-go, grpc-js-xds (their child names)",
		Says:     "a locality (region, zone, sub_zone) appears once per ClusterLoadAssignment, across all priorities",
		Else: "drop endpoints: grpc-java keys a ClusterLoadAssignment's endpoints by locality in one map and checks duplicates " +
			"within a priority only, so a later copy silently replaces the earlier one's endpoints (a color's calls reach the base); " +
			"the others reject a duplicate within a priority, and grpc-go and grpc-js-xds name the upper priority's child anew on " +
			"every update when a locality repeats across priorities",
		Sources: []string{
			java157 + javaXDS + "XdsEndpointResource.java:96, 116-124",
			javaM + javaXDS + "XdsEndpointResource.java:118, 138-146",
			goEDS160 + ":155-157", goEDS185 + ":230-233",
			go185 + "internal/xds/balancer/cdsbalancer/configbuilder_childname.go:56-100",
			jsEDS110 + ":51-57", jsEDS114 + ":76-81",
			core151 + coreXDS + "xds_endpoint.cc:374-385",
			js114 + "src/load-balancer-cds.ts:331-363",
		},
		check: func(r resource) []string {
			type key struct{ region, zone, subZone string }
			seen := map[key]uint32{}
			var out []string
			for _, l := range r.cla.GetEndpoints() {
				loc := l.GetLocality()
				k := key{loc.GetRegion(), loc.GetZone(), loc.GetSubZone()}
				if p, dup := seen[k]; dup {
					out = append(out, fmt.Sprintf("locality {region %q, zone %q, sub_zone %q} at priorities %d and %d", k.region, k.zone, k.subZone, p, l.GetPriority()))
					continue
				}
				seen[k] = l.GetPriority()
			}
			return out
		},
	},
	{
		ID:       "priorities-contiguous",
		Families: AllClients,
		Clients:  "grpc-go, grpc-java, grpc-js-xds, C-core",
		Says:     "the localities' priorities are 0..N-1 with none missing",
		Else:     "reject the assignment (\"sparse priorities\")",
		Sources: []string{
			goEDS160 + ":170-174", goEDS185 + ":255-259",
			java157 + javaXDS + "XdsEndpointResource.java:126-127", javaM + javaXDS + "XdsEndpointResource.java:148-149",
			jsEDS110 + ":88-92", jsEDS114 + ":108-110",
			core151 + coreXDS + "xds_endpoint.cc:369-373, 388-391",
		},
		check: func(r resource) []string {
			if r.cla == nil {
				return nil
			}
			has := map[uint32]bool{}
			var top uint32
			for _, l := range r.cla.GetEndpoints() {
				has[l.GetPriority()] = true
				top = max(top, l.GetPriority())
			}
			for p := range top {
				if !has[p] {
					return []string{fmt.Sprintf("priority %d missing below %d", p, top)}
				}
			}
			return nil
		},
	},
	{
		ID:       "weights",
		Families: AllClients,
		Clients:  "grpc-go, grpc-java, grpc-js-xds, C-core",
		Says: "every locality has a load_balancing_weight of at least 1, every endpoint's weight (when set) is at least 1, and the " +
			"weights of a priority's localities, and of a locality's endpoints, sum to at most 4294967295",
		Else: "drop a locality of weight 0 or none (grpc-go, grpc-java; a priority left empty makes the assignment rejected), reject " +
			"an endpoint of weight 0 or a sum past uint32 (grpc-go, grpc-js-xds), or panic the channel on such a sum (grpc-java)",
		Sources: []string{
			goEDS160 + ":90-93, 123-132", goEDS185 + ":111-121, 198-207",
			java157 + javaXDS + "XdsEndpointResource.java:174-177", javaM + javaXDS + "XdsEndpointResource.java:197-200",
			java157 + javaXDS + "WeightedRandomPicker.java:98-107",
			jsEDS110 + ":80-87", jsEDS114 + ":102-107",
			core151 + coreXDS + "xds_endpoint.cc:160-172, 243-251, 393-404",
		},
		check: func(r resource) []string {
			var out []string
			sums := map[uint32]uint64{}
			for _, l := range r.cla.GetEndpoints() {
				name := localityName(l)
				if l.GetLoadBalancingWeight().GetValue() == 0 {
					out = append(out, name+" has weight 0 or none")
				}
				sums[l.GetPriority()] += uint64(l.GetLoadBalancingWeight().GetValue())
				var sum uint64
				for _, ep := range l.GetLbEndpoints() {
					if w := ep.GetLoadBalancingWeight(); w != nil && w.GetValue() == 0 {
						out = append(out, fmt.Sprintf("an endpoint of %s (%s) has weight 0", name, addrOf(ep)))
					}
					sum += uint64(max(ep.GetLoadBalancingWeight().GetValue(), 1))
				}
				if sum > math.MaxUint32 {
					out = append(out, fmt.Sprintf("the endpoint weights of %s sum to %d", name, sum))
				}
			}
			for p, sum := range sums {
				if sum > math.MaxUint32 {
					out = append(out, fmt.Sprintf("the locality weights of priority %d sum to %d", p, sum))
				}
			}
			return out
		},
	},
	{
		ID:       "addresses",
		Families: AllClients,
		Clients:  "grpc-js-xds, C-core, grpc-java from 1.74 (IP addresses); grpc-go, grpc-js-xds, C-core (unique)",
		Says:     "every endpoint is an IP address and a port 1..65535, and no address appears twice in an assignment, across all priorities",
		Else:     "reject the assignment (a DNS name: grpc-js-xds, C-core, grpc-java from 1.74; a duplicate address: grpc-go, grpc-js-xds, C-core)",
		Sources: []string{
			jsEDS110 + ":64-78", jsEDS114 + ":51-61, 85-99",
			javaM + javaXDS + "XdsEndpointResource.java:249-259",
			goEDS160 + ":97-100, 117", goEDS185 + ":131-137, 192",
			core151 + coreXDS + "xds_endpoint.cc:153-159, 197-213, 281-288",
		},
		check: func(r resource) []string {
			var out []string
			seen := map[string]bool{}
			for _, l := range r.cla.GetEndpoints() {
				for _, ep := range l.GetLbEndpoints() {
					sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
					a := addrOf(ep)
					if _, err := netip.ParseAddr(sa.GetAddress()); err != nil || sa.GetPortValue() == 0 || sa.GetPortValue() > 65535 {
						out = append(out, fmt.Sprintf("endpoint %s is not an IP address and port", a))
					}
					if seen[a] {
						out = append(out, fmt.Sprintf("endpoint %s appears twice", a))
					}
					seen[a] = true
				}
			}
			return out
		},
	},
	{
		ID:       "health",
		Families: AllClients,
		Clients:  "grpc-go, grpc-java, grpc-js-xds, C-core",
		Says:     "every endpoint's health_status is HEALTHY, UNKNOWN or DRAINING",
		Else:     "give an endpoint of another status no call, as DRAINING; Muster means only these three",
		Sources: []string{
			go160 + "xds/internal/balancer/clusterresolver/configbuilder.go:261",
			go185 + "internal/xds/balancer/cdsbalancer/configbuilder.go:406",
			java157 + javaXDS + "XdsEndpointResource.java:192-195", javaM + javaXDS + "XdsEndpointResource.java:236-237",
			core151 + coreXDS + "xds_endpoint.cc:152-159",
		},
		check: func(r resource) []string {
			var out []string
			for _, l := range r.cla.GetEndpoints() {
				for _, ep := range l.GetLbEndpoints() {
					switch ep.GetHealthStatus() {
					case corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNKNOWN, corev3.HealthStatus_DRAINING:
					default:
						out = append(out, fmt.Sprintf("endpoint %s is %s", addrOf(ep), ep.GetHealthStatus()))
					}
				}
			}
			return out
		},
	},
	{
		ID:       "metadata-values",
		Families: GRPCJava,
		Clients:  "grpc-java from 1.72",
		Says:     "every value of an endpoint's filter metadata has its kind set",
		Else:     "throw converting it to JSON (a panic of its xDS client before 1.79, a NACK after)",
		Sources: []string{
			javaM + javaXDS + "XdsEndpointResource.java:205-226",
			javaM + javaXDS + "internal/ProtobufJsonConverter.java:41-59",
		},
		check: func(r resource) []string {
			var out []string
			for _, l := range r.cla.GetEndpoints() {
				for _, ep := range l.GetLbEndpoints() {
					for key, st := range ep.GetMetadata().GetFilterMetadata() {
						if !kindsSet(st) {
							out = append(out, fmt.Sprintf("endpoint %s: filter metadata %q has a value without a kind", addrOf(ep), key))
						}
					}
				}
			}
			return out
		},
	},
	{
		ID:       "router-filter",
		Families: AllClients,
		Clients:  "grpc-go, grpc-java, grpc-js-xds, C-core",
		Says:     "a Listener's api_listener is an HttpConnectionManager with routes by RDS over ADS, whose http_filters are not empty and end with the router",
		Else:     "reject the Listener",
		Sources: []string{
			go160 + "xds/internal/xdsclient/xdsresource/unmarshal_lds.go:90, 233",
			go185 + "internal/xds/xdsclient/xdsresource/unmarshal_lds.go:99, 255",
			java157 + javaXDS + "XdsListenerResource.java:104-127, 454-531",
			js114 + "src/xds-resource-type/listener-resource-type.ts:93-135",
			core151 + coreXDS + "xds_listener.cc:375-457, 461-497",
		},
		check: func(r resource) []string {
			if r.l == nil {
				return nil
			}
			hcm := &hcmv3.HttpConnectionManager{}
			if err := r.l.GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
				return []string{"api_listener is not an HttpConnectionManager: " + err.Error()}
			}
			var out []string
			if hcm.GetRds().GetConfigSource().GetAds() == nil {
				out = append(out, "routes not by RDS over ADS")
			}
			fs := hcm.GetHttpFilters()
			switch {
			case len(fs) == 0:
				out = append(out, "http_filters is empty")
			case !fs[len(fs)-1].GetTypedConfig().MessageIs(&routerv3.Router{}):
				out = append(out, "the last http filter is not the router")
			}
			return out
		},
	},
	{
		ID:       "header-match",
		Families: AllClients,
		Clients:  "C-core before 1.56, grpc-java before 1.53, grpc-go before 1.56; grpc-java, grpc-js-xds (a matcher kind they know)",
		Says:     "route header matchers use exact_match or present_match (not string_match)",
		Else:     "reject the whole RouteConfiguration",
		Sources: []string{
			java157 + javaXDS + "internal/MatcherParser.java:28-30, 48-50, 63-65",
			jsRDS110 + ":117-135", jsRDS114 + ":126-153",
			core151 + coreXDS + "xds_route_config.cc:488-552",
		},
		check: func(r resource) []string {
			var out []string
			eachRoute(r.rc, func(rt *routev3.Route) {
				for _, h := range rt.GetMatch().GetHeaders() {
					switch h.GetHeaderMatchSpecifier().(type) {
					case *routev3.HeaderMatcher_ExactMatch, *routev3.HeaderMatcher_PresentMatch:
					default:
						out = append(out, fmt.Sprintf("header %q matched by %T", h.GetName(), h.GetHeaderMatchSpecifier()))
					}
				}
			})
			return out
		},
	},
	{
		ID:       "weighted-total",
		Families: AllClients,
		Clients:  "grpc-go, grpc-java, grpc-js-xds (the sum); C-core 1.51 (total_weight, every weight stated)",
		Says:     "weighted_clusters state every weight (0 included) and total_weight, equal to the sum of their weights, which is 1..4294967295",
		Else: "reject a sum of 0 or past uint32 (grpc-go, grpc-java, grpc-js-xds); take an absent total as 100 and reject another sum " +
			"(older C-core and grpc-go), or draw over 0..total_weight (grpc-js-xds before 1.14.1)",
		Sources: []string{
			goRDS160 + ":316-338", goRDS185 + ":344-366",
			java157 + javaXDS + "XdsRouteConfigureResource.java:467-496, 590-591",
			jsRDS110 + ":148-155", jsRDS114 + ":165-175",
			core151 + coreXDS + "xds_route_config.cc:764-824",
		},
		check: func(r resource) []string {
			var out []string
			eachRoute(r.rc, func(rt *routev3.Route) {
				wc := rt.GetRoute().GetWeightedClusters()
				if wc == nil {
					return
				}
				var sum uint64
				for _, c := range wc.GetClusters() {
					if c.GetWeight() == nil {
						out = append(out, fmt.Sprintf("weighted cluster %q without a weight", c.GetName()))
					}
					sum += uint64(c.GetWeight().GetValue())
				}
				//lint:ignore SA1019 total_weight is deprecated, and what older clients read
				total := wc.GetTotalWeight()
				switch {
				case total == nil:
					out = append(out, "weighted_clusters without total_weight")
				case uint64(total.GetValue()) != sum:
					out = append(out, fmt.Sprintf("weighted_clusters total_weight %d, sum %d", total.GetValue(), sum))
				case sum == 0 || sum > math.MaxUint32:
					out = append(out, fmt.Sprintf("weighted_clusters of total weight %d", sum))
				}
			})
			return out
		},
	},
	{
		ID:       "timeout-range",
		Families: GRPCJava,
		Clients:  "grpc-java",
		Says:     "a route's max_stream_duration and grpc_timeout_header_max are 0 (none) or 1 ms to 10^7 s",
		Else: "write the timeout into a service config as a decimal string, in scientific notation outside that range, which its " +
			"parser refuses: every call of the route fails",
		Sources: []string{
			java157 + javaXDS + "XdsNameResolver.java:255-257", javaM + javaXDS + "XdsNameResolver.java:303-305",
			java157 + "core/src/main/java/io/grpc/internal/JsonUtil.java:236-246, 345-357",
		},
		check: func(r resource) []string {
			var out []string
			eachRoute(r.rc, func(rt *routev3.Route) {
				msd := rt.GetRoute().GetMaxStreamDuration()
				for name, d := range map[string]*durationpb.Duration{
					"max_stream_duration":     msd.GetMaxStreamDuration(),
					"grpc_timeout_header_max": msd.GetGrpcTimeoutHeaderMax(),
				} {
					if d == nil {
						continue
					}
					if v := d.AsDuration(); v != 0 && (v < time.Millisecond || d.GetSeconds() >= 1e7) {
						out = append(out, fmt.Sprintf("%s %v", name, v))
					}
				}
			})
			slices.Sort(out)
			return out
		},
	},
	{
		ID:       "retry",
		Families: AllClients,
		Clients:  "grpc-go, grpc-java, grpc-js-xds, C-core",
		Says: "a retry_policy has num_retries 1..4, a base_interval of at least 1 ms and a max_interval not below it, and retry_on names " +
			"only codes gRPC honours, without spaces",
		Else: "reject the RouteConfiguration (num_retries 0: grpc-go, grpc-js-xds; the backoffs: grpc-go, grpc-java, grpc-js-xds), " +
			"fail every call of the route (num_retries 0: grpc-java; past 2147483646 or a backoff under 1 ms: C-core), cap the " +
			"attempts at 5 (grpc-java, grpc-js-xds, C-core, where grpc-go does not), or drop the codes",
		Sources: []string{
			goRDS160 + ":161-205", goRDS185 + ":169-213",
			java157 + javaXDS + "XdsRouteConfigureResource.java:524-572", javaM + javaXDS + "XdsRouteConfigureResource.java:529-577",
			java157 + "core/src/main/java/io/grpc/internal/ManagedChannelServiceConfig.java:333-338",
			jsRDS110 + ":73-86", jsRDS114 + ":47-52, 78-95",
			js114 + "src/resolver-xds.ts:78-84, 223-229",
			core151 + coreXDS + "xds_route_config.cc:666-734",
			core151 + "src/core/ext/filters/client_channel/retry_service_config.cc:137-164",
		},
		check: func(r resource) []string {
			var out []string
			eachRoute(r.rc, func(rt *routev3.Route) {
				rp := rt.GetRoute().GetRetryPolicy()
				if rp == nil {
					return
				}
				if n := rp.GetNumRetries(); n != nil && (n.GetValue() == 0 || n.GetValue() > 4) {
					out = append(out, fmt.Sprintf("num_retries %d", n.GetValue()))
				}
				if b := rp.GetRetryBackOff(); b != nil {
					base, maxI := b.GetBaseInterval().AsDuration(), b.GetMaxInterval().AsDuration()
					if base < time.Millisecond {
						out = append(out, fmt.Sprintf("retry_back_off base_interval %v", base))
					}
					if b.GetMaxInterval() != nil && maxI < base {
						out = append(out, "retry_back_off max_interval below base_interval")
					}
				}
				for _, code := range strings.Split(rp.GetRetryOn(), ",") {
					if !retryCodes[code] {
						out = append(out, fmt.Sprintf("retry_on %q", code))
					}
				}
			})
			return out
		},
	},
	{
		ID:       "js-backoff",
		Families: GRPCJS,
		Clients:  "grpc-js-xds",
		Says:     "a retry_policy's base_interval and max_interval are under 1 s",
		Else: "read a backoff as its seconds, a string, followed by its fraction of a second: 1 s becomes 10 s, 2.5 s " +
			"20.5 s (the routes of grpc-js-xds clients carry each backoff of 1 s or more as 999 ms)",
		Sources: []string{js110 + "src/resolver-xds.ts:208-210, 448-453", js114 + "src/resolver-xds.ts:54-56, 230-235",
			js114 + "src/generated/google/protobuf/Duration.ts:11"},
		check: func(r resource) []string {
			var out []string
			eachRoute(r.rc, func(rt *routev3.Route) {
				b := rt.GetRoute().GetRetryPolicy().GetRetryBackOff()
				for _, d := range []*durationpb.Duration{b.GetBaseInterval(), b.GetMaxInterval()} {
					if d.GetSeconds() > 0 {
						out = append(out, fmt.Sprintf("retry_back_off interval %v", d.AsDuration()))
					}
				}
			})
			return out
		},
	},
	{
		ID:       "eds-cluster",
		Families: AllClients,
		Clients:  "grpc-go, grpc-java, grpc-js-xds",
		Says:     "a Cluster is of type EDS with its endpoints over ADS",
		Else:     "reject the Cluster",
		Sources: []string{
			goCDS160 + ":184-187", goCDS185 + ":249-251",
			java157 + javaXDS + "XdsClusterResource.java:229-251",
			jsCDS110 + ":227-228", jsCDS114 + ":368-378",
		},
		check: func(r resource) []string {
			if r.c == nil {
				return nil
			}
			if r.c.GetType() != clusterv3.Cluster_EDS || r.c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
				return []string{"not an EDS cluster over ADS"}
			}
			return nil
		},
	},
	{
		ID:       "lb-policy",
		Families: AllClients,
		Clients:  "grpc-js-xds, C-core, grpc-go",
		Says:     "a Cluster's lb_policy is ROUND_ROBIN (other policies go in load_balancing_policy)",
		Else:     "reject LEAST_REQUEST (grpc-js-xds, C-core, grpc-go 1.60 without its flag) and crash on RING_HASH (C-core 1.51, grpc/grpc#31766)",
		Sources: []string{
			goCDS160 + ":86-128", goCDS185 + ":123-161",
			jsCDS110 + ":134-173", jsCDS114 + ":254-291",
			core151 + coreXDS + "xds_cluster.cc:319-385",
		},
		check: func(r resource) []string {
			if r.c == nil || r.c.GetLbPolicy() == clusterv3.Cluster_ROUND_ROBIN {
				return nil
			}
			return []string{"lb_policy " + r.c.GetLbPolicy().String()}
		},
	},
	{
		ID:       "lb-policies",
		Families: AllClients,
		Clients:  "grpc-java, grpc-js-xds, grpc-go, C-core",
		Says: "a load_balancing_policy ends with wrr_locality over round_robin (which every client has); ring_hash states hash_function " +
			"XX_HASH and no ring sizes; least_request a choice_count of at least 2; a TypedStruct carries a value",
		Else: "reject the Cluster: a list with no policy it has, a ring_hash hash function other than xxHash (grpc-java, grpc-go) or " +
			"ring sizes (grpc-js-xds reads the uint64s as strings), a choice_count below 2 (grpc-java, grpc-go), a TypedStruct " +
			"without value (grpc-js-xds)",
		Sources: []string{
			java157 + javaXDS + "LoadBalancerConfigFactory.java:223-289",
			java157 + javaXDS + "LeastRequestLoadBalancerProvider.java:63-79",
			js110 + "src/load-balancer-ring-hash.ts:487-493", js114 + "src/load-balancer-ring-hash.ts:522-529",
			js114 + "src/lb-policy-registry/typed-struct.ts:101-107",
			go160 + "xds/internal/xdsclient/xdslbregistry/xdslbregistry.go:58-85",
			core151 + coreXDS + "xds_lb_policy_registry.cc:171-240",
		},
		check: checkLBPolicies,
	},
	{
		ID:       "outlier-percent",
		Families: AllClients,
		Clients:  "grpc-go, grpc-java, grpc-js-xds, C-core",
		Says:     "outlier_detection's max_ejection_percent, failure_percentage_threshold and enforcing_* are at most 100, and its durations not negative",
		Else: "reject the Cluster (or: throw building the balancer for a value that wraps negative, grpc-java; accept a " +
			"failure_percentage_threshold over 100 and fail every call of the cluster, C-core)",
		Sources: []string{
			goCDS160 + ":559-621", goCDS185 + ":686-745",
			java157 + javaXDS + "XdsClusterResource.java:292-345", javaM + javaXDS + "XdsClusterResource.java:373-426",
			jsCDS110 + ":179-202", jsCDS114 + ":297-320",
			core151 + coreXDS + "xds_cluster.cc:509-529, 557-598",
			coreM + "src/core/xds/grpc/xds_cluster_parser.cc:607-685",
		},
		check: func(r resource) []string {
			od := r.c.GetOutlierDetection()
			if od == nil {
				return nil
			}
			var out []string
			for _, f := range []struct {
				name string
				v    *wrapperspb.UInt32Value
			}{
				{"max_ejection_percent", od.GetMaxEjectionPercent()},
				{"failure_percentage_threshold", od.GetFailurePercentageThreshold()},
				{"enforcing_success_rate", od.GetEnforcingSuccessRate()},
				{"enforcing_failure_percentage", od.GetEnforcingFailurePercentage()},
				{"enforcing_consecutive_5xx", od.GetEnforcingConsecutive_5Xx()},
				{"enforcing_consecutive_gateway_failure", od.GetEnforcingConsecutiveGatewayFailure()},
			} {
				if f.v != nil && f.v.GetValue() > 100 {
					out = append(out, fmt.Sprintf("%s = %d", f.name, f.v.GetValue()))
				}
			}
			for _, d := range []*durationpb.Duration{od.GetInterval(), od.GetBaseEjectionTime(), od.GetMaxEjectionTime()} {
				if d != nil && d.AsDuration() < 0 {
					out = append(out, fmt.Sprintf("a negative duration %v", d.AsDuration()))
				}
			}
			return out
		},
	},
	{
		ID:       "max-requests",
		Families: AllClients,
		Clients:  "grpc-go, grpc-java, grpc-js-xds, C-core",
		Says:     "circuit_breakers' max_requests is at least 1",
		Else:     "accept 0 and then drop every call",
		Sources: []string{
			go160 + "xds/internal/xdsclient/requests_counter.go:72", go185 + "internal/xds/xdsclient/requests_counter.go:72",
			java157 + javaXDS + "ClusterImplLoadBalancer.java:322-327",
			js114 + "src/load-balancer-xds-cluster-impl.ts:54, 146, 249",
			core151 + coreXDS + "xds_cluster.cc:461-482",
		},
		check: func(r resource) []string {
			var out []string
			for _, th := range r.c.GetCircuitBreakers().GetThresholds() {
				if m := th.GetMaxRequests(); m != nil && m.GetValue() == 0 {
					out = append(out, "max_requests 0")
				}
			}
			return out
		},
	},
}

// checkLBPolicies checks a Cluster's load_balancing_policy (rule
// lb-policies).
func checkLBPolicies(r resource) []string {
	ps := r.c.GetLoadBalancingPolicy().GetPolicies()
	if len(ps) == 0 {
		return nil
	}
	var out []string
	last := ps[len(ps)-1].GetTypedExtensionConfig().GetTypedConfig()
	wl := &wrrlocalityv3.WrrLocality{}
	if !last.MessageIs(wl) || last.UnmarshalTo(wl) != nil ||
		len(wl.GetEndpointPickingPolicy().GetPolicies()) == 0 ||
		!wl.GetEndpointPickingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().MessageIs(&roundrobinv3.RoundRobin{}) {
		out = append(out, "the last policy is not wrr_locality over round_robin")
	}
	for _, p := range ps {
		tc := p.GetTypedExtensionConfig().GetTypedConfig()
		rh, lr, ts := &ringhashv3.RingHash{}, &leastrequestv3.LeastRequest{}, &xdstypev3.TypedStruct{}
		switch {
		case tc.MessageIs(rh):
			if err := tc.UnmarshalTo(rh); err != nil {
				out = append(out, "ring_hash config: "+err.Error())
				continue
			}
			if rh.GetHashFunction() != ringhashv3.RingHash_XX_HASH {
				out = append(out, "ring_hash hash_function "+rh.GetHashFunction().String())
			}
			if rh.GetMinimumRingSize() != nil || rh.GetMaximumRingSize() != nil {
				out = append(out, "ring_hash states ring sizes")
			}
		case tc.MessageIs(lr):
			if err := tc.UnmarshalTo(lr); err != nil || lr.GetChoiceCount() != nil && lr.GetChoiceCount().GetValue() < 2 {
				out = append(out, "least_request choice_count below 2")
			}
		case tc.MessageIs(ts):
			if err := tc.UnmarshalTo(ts); err != nil || ts.GetValue() == nil {
				out = append(out, "TypedStruct "+ts.GetTypeUrl()+" without value")
			}
		}
	}
	return out
}

// kindsSet reports whether every value in st, nested ones included, has
// its kind set.
func kindsSet(st *structpb.Struct) bool {
	for _, v := range st.GetFields() {
		if !kindSet(v) {
			return false
		}
	}
	return true
}

func kindSet(v *structpb.Value) bool {
	switch k := v.GetKind().(type) {
	case nil:
		return false
	case *structpb.Value_StructValue:
		return kindsSet(k.StructValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if !kindSet(e) {
				return false
			}
		}
	}
	return true
}

// retryCodes are the retry_on names gRPC clients honour (gRFC A44).
var retryCodes = map[string]bool{"cancelled": true, "deadline-exceeded": true, "internal": true,
	"resource-exhausted": true, "unavailable": true}

// eachRoute calls f on every route of rc (nil: none).
func eachRoute(rc *routev3.RouteConfiguration, f func(*routev3.Route)) {
	for _, vh := range rc.GetVirtualHosts() {
		for _, rt := range vh.GetRoutes() {
			f(rt)
		}
	}
}

func localityName(l *endpointv3.LocalityLbEndpoints) string {
	loc := l.GetLocality()
	return fmt.Sprintf("locality {region %q, zone %q, sub_zone %q} (priority %d)", loc.GetRegion(), loc.GetZone(), loc.GetSubZone(), l.GetPriority())
}

func addrOf(ep *endpointv3.LbEndpoint) string {
	sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
	return fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
}
