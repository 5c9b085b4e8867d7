package xds

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/registry"
)

var testCallPolicy = registry.Policy{
	Timeout:        800 * time.Millisecond,
	Retry:          registry.RetryPolicy{MaxAttempts: 3, Codes: []string{"UNAVAILABLE", "ABORTED", "RESOURCE_EXHAUSTED"}},
	Outlier:        registry.OutlierPolicy{FailurePercent: 40},
	MaxConcurrent:  100,
	AffinityHeader: "x-user",
}.Normalize()

// Every route of a service, color and canary routes included, carries the
// timeout and the retries; ring hash routes hash the policy's header.
func TestCallPolicyInEveryRoute(t *testing.T) {
	co := coloring{colors: []string{"blue"}, canary: registry.Canary{Color: "blue", Percent: 10}, hash: true, call: routeParts(testCallPolicy)}
	rc := routeWithColors("greeter", co)
	if err := rc.Validate(); err != nil {
		t.Fatalf("route does not validate: %v", err)
	}
	routes := rc.GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 3 {
		t.Fatalf("%d routes, want 3 (blue, colored to the base, the rest)", len(routes))
	}
	for i, r := range routes {
		a := r.GetRoute()
		if d := a.GetMaxStreamDuration(); d.GetMaxStreamDuration().AsDuration() != 800*time.Millisecond ||
			d.GetGrpcTimeoutHeaderMax().AsDuration() != 800*time.Millisecond {
			t.Errorf("route %d: max_stream_duration %v, want 800ms and grpc_timeout_header_max 800ms", i, d)
		}
		rp := a.GetRetryPolicy()
		if rp.GetRetryOn() != "unavailable,resource-exhausted" || rp.GetNumRetries().GetValue() != 2 ||
			rp.GetRetryBackOff().GetBaseInterval().AsDuration() != registry.DefaultRetryBackoffBase ||
			rp.GetRetryBackOff().GetMaxInterval().AsDuration() != registry.DefaultRetryBackoffMax {
			t.Errorf("route %d: retry policy %v, want unavailable,resource-exhausted (ABORTED is not a gRPC retry_on), 2 retries, 100ms..1s", i, rp)
		}
		if h := a.GetHashPolicy(); len(h) != 2 || h[0].GetHeader().GetHeaderName() != "x-user" {
			t.Errorf("route %d: hash policy %v, want the header x-user first", i, h)
		}
	}
	// Without a policy the routes are as before.
	plain := routeWithColors("greeter", coloring{hash: true})
	a := plain.GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
	if a.GetMaxStreamDuration() != nil || a.GetRetryPolicy() != nil || a.GetHashPolicy()[0].GetHeader().GetHeaderName() != registry.DefaultAffinityHeader {
		t.Errorf("route without a policy: %v", a)
	}
	// Retries only of codes gRPC cannot retry by xDS: no retry policy.
	only := routeParts(registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"ABORTED"}}}.Normalize())
	if rp := routeTo("greeter", coloring{call: only}).GetRetryPolicy(); rp != nil {
		t.Errorf("retry of ABORTED only: %v, want none", rp)
	}
}

// Every Cluster carries failure-percentage ejection and the cap on calls
// in flight; the rest of the cluster is as without the policy.
func TestCallPolicyInTheCluster(t *testing.T) {
	c := clusterFor("greeter", RoundRobin, musterConfig{})
	applyClusterPolicy(c, clusterParts(testCallPolicy))
	if err := c.Validate(); err != nil {
		t.Fatalf("cluster does not validate: %v", err)
	}
	od := c.GetOutlierDetection()
	if od.GetFailurePercentageThreshold().GetValue() != 40 || od.GetEnforcingFailurePercentage().GetValue() != 100 ||
		od.GetFailurePercentageRequestVolume().GetValue() != registry.DefaultOutlierMinRequests ||
		od.GetBaseEjectionTime().AsDuration() != registry.DefaultOutlierBaseEjection ||
		od.GetMaxEjectionPercent().GetValue() != registry.DefaultOutlierMaxEjectedPercent ||
		od.GetEnforcingSuccessRate() == nil || od.GetEnforcingSuccessRate().GetValue() != 0 ||
		od.GetEnforcingConsecutive_5Xx() == nil || od.GetEnforcingConsecutive_5Xx().GetValue() != 0 {
		t.Errorf("outlier detection %v", od)
	}
	th := c.GetCircuitBreakers().GetThresholds()
	if len(th) != 1 || th[0].GetMaxRequests().GetValue() != 100 {
		t.Errorf("circuit breakers %v, want max_requests 100", th)
	}
	plain := clusterFor("greeter", RoundRobin, musterConfig{})
	applyClusterPolicy(plain, registry.Policy{})
	if !proto.Equal(plain.GetOutlierDetection(), outlierStandby()) || plain.GetCircuitBreakers() != nil {
		t.Errorf("cluster without a policy: %v, want the standby outlier detection and no circuit breakers", plain)
	}
	if err := plain.Validate(); err != nil {
		t.Errorf("cluster without a policy does not validate: %v", err)
	}
}
