package xds

import (
	"math"
	"reflect"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/musterhq/muster/registry"
)

// A service's call policy (registry.Policy, followed with WithPolicies)
// in xDS, as gRPC's xDS clients read it:
//
//   - timeout: the route's max_stream_duration, with grpc_timeout_header_max
//     equal to it, so that a caller's shorter deadline still wins (gRFC A31);
//     gRPC ignores RouteAction.timeout.
//   - retries: the route's retry_policy (gRFC A44): retry_on lists the codes
//     gRPC clients honour there (cancelled, deadline-exceeded, internal,
//     resource-exhausted, unavailable; others of the policy are left out),
//     num_retries is maxAttempts - 1, and the backoffs.
//   - outlier ejection: the Cluster's outlier_detection by failure
//     percentage (gRFC A50), evaluated every outlierInterval, success-rate
//     and consecutive-5xx ejection off (gRPC has no consecutive-5xx); a
//     policy without ejection publishes outlierStandby.
//   - max concurrent calls: the Cluster's circuit_breakers max_requests
//     (gRFC A32).
//   - the affinity header: the header of the ring hash hash_policy.
//
// Every route gets the route parts, color and canary routes included, and
// every cluster of the service (its colors' too) the cluster parts.

// outlierInterval is how often clients evaluate failure-percentage
// ejection.
const outlierInterval = 1_000_000_000 // 1 s, in ns

// xdsRetryOn maps the policy's retryable codes to the names gRPC clients
// accept in retry_on.
var xdsRetryOn = map[string]string{
	"CANCELLED":          "cancelled",
	"DEADLINE_EXCEEDED":  "deadline-exceeded",
	"INTERNAL":           "internal",
	"RESOURCE_EXHAUSTED": "resource-exhausted",
	"UNAVAILABLE":        "unavailable",
}

// routeParts returns the parts of p that a route carries, for comparing
// policies: a change of the others republishes no route.
func routeParts(p registry.Policy) registry.Policy {
	return registry.Policy{Timeout: p.Timeout, Retry: p.Retry, AffinityHeader: p.AffinityHeader}
}

// clusterParts returns the parts of p that a cluster carries.
func clusterParts(p registry.Policy) registry.Policy {
	return registry.Policy{Outlier: p.Outlier, MaxConcurrent: p.MaxConcurrent}
}

// samePolicy reports whether a and b are equal.
func samePolicy(a, b registry.Policy) bool { return reflect.DeepEqual(a, b) }

// applyRoutePolicy sets the timeout and the retries of p on a.
func applyRoutePolicy(a *routev3.RouteAction, p registry.Policy) {
	if p.Timeout > 0 {
		d := durationpb.New(p.Timeout)
		a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: d, GrpcTimeoutHeaderMax: d}
	}
	if r := p.Retry; r.MaxAttempts > 1 {
		var on []string
		for _, c := range r.Codes {
			if name, ok := xdsRetryOn[c]; ok {
				on = append(on, name)
			}
		}
		if len(on) > 0 {
			a.RetryPolicy = &routev3.RetryPolicy{
				RetryOn:    strings.Join(on, ","),
				NumRetries: wrapperspb.UInt32(uint32(r.MaxAttempts - 1)),
				RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
					BaseInterval: durationpb.New(r.BackoffBase),
					MaxInterval:  durationpb.New(r.BackoffMax),
				},
			}
		}
	}
}

// applyClusterPolicy sets the outlier ejection and the cap on calls in
// flight of p on c. A policy that ejects nothing gets outlierStandby.
func applyClusterPolicy(c *clusterv3.Cluster, p registry.Policy) {
	c.OutlierDetection = outlierStandby()
	if o := p.Outlier; o.FailurePercent > 0 {
		od := c.OutlierDetection
		od.Interval = durationpb.New(outlierInterval)
		od.BaseEjectionTime = durationpb.New(o.BaseEjection)
		od.MaxEjectionPercent = wrapperspb.UInt32(uint32(o.MaxEjectedPercent))
		od.FailurePercentageThreshold = wrapperspb.UInt32(uint32(o.FailurePercent))
		od.FailurePercentageRequestVolume = wrapperspb.UInt32(uint32(o.MinRequests))
		// Judged with as few as two endpoints of enough calls (the
		// default, 5, leaves small services unguarded).
		od.FailurePercentageMinimumHosts = wrapperspb.UInt32(2)
	}
	if p.MaxConcurrent > 0 {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:    corev3.RoutingPriority_DEFAULT,
			MaxRequests: wrapperspb.UInt32(uint32(p.MaxConcurrent)),
		}}}
	}
}

// outlierStandby is the outlier_detection of a Cluster whose policy ejects
// nothing, when the control plane follows policies: failure-percentage
// ejection that counts calls and can eject nothing (a threshold of 100 %,
// which no failure percentage exceeds, and more endpoints than a cluster
// has: math.MaxInt32, the largest count every client holds, since
// grpc-java reads the uint32 into an int and its balancer refuses a
// negative one by throwing in the channel's sync context, a panic that
// fails every call), the other algorithms off. Without it, turning ejection on later is
// lost on grpc-js-xds (1.10.1 to 1.14.1, the newest, at least):
//
//   - its XdsClient drops a Cluster it finds equal to the one it holds,
//     comparing only the fields of the one it holds (deepEqual in
//     src/xds-resource-type/xds-resource-type.ts); a Cluster without
//     outlier_detection converts to {child_policy: []}
//     (convertOutlierDetectionUpdate in cluster-resource-type.ts), so a
//     Cluster that gains one is taken for no change;
//   - grpc-js's outlier_detection balancer builds the picker of a config
//     update with the previous config's "count calls or not"
//     (updateAddressList sets latestConfig after its child's synchronous
//     updateState, load-balancer-outlier-detection.ts), so a channel that
//     counted nothing keeps a picker that counts nothing until its
//     endpoints or their connections change.
//
// With the standby every client counts calls to the cluster (an increment
// per call) whatever the policy.
func outlierStandby() *clusterv3.OutlierDetection {
	zero := wrapperspb.UInt32(0)
	return &clusterv3.OutlierDetection{
		FailurePercentageThreshold:         wrapperspb.UInt32(100),
		EnforcingFailurePercentage:         wrapperspb.UInt32(100),
		FailurePercentageMinimumHosts:      wrapperspb.UInt32(math.MaxInt32),
		EnforcingSuccessRate:               zero,
		EnforcingConsecutive_5Xx:           zero,
		EnforcingConsecutiveGatewayFailure: zero,
	}
}
