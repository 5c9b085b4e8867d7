package wrr_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/balancer/wrr"
	"github.com/musterhq/muster/internal/testkit/balancersuite"
	"github.com/musterhq/muster/internal/testkit/balancertest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// The tests here run muster_wrr behind the Muster resolver, which imports
// this package (it names muster_wrr for a target's lb=wrr): they are in
// the external test package.

// shareTolerance is the largest difference, in share of all calls,
// allowed between a backend's share and its weight's. The sequence is
// exact over each period, so the only slack needed is for the partial
// period at each end of the run and for picks made while a connection is
// briefly not ready.
const shareTolerance = 0.02

func TestWeightsFromTheMusterResolver(t *testing.T) {
	reg := balancersuite.StartRegistry(t)
	bs := balancertest.Backends(t, 4)
	weights := []int{100, 100, 200, 0} // the last one draining
	for i, b := range bs {
		in := registry.Instance{Name: "greeter", ID: fmt.Sprint("i", i), Addr: b.Addr, Weight: weights[i], Draining: weights[i] == 0}
		reg.Register(t, in)
	}
	conn := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(wrr.Name, "", false), grpc.WithResolvers(reg.Builder))
	balancertest.CallUntil(t, conn, 10*time.Second, "every weighted backend called", balancertest.ServedAll(bs[:3]...))
	bs[3].ResetCalls()

	const n = 4000
	got := balancertest.Calls(conn, n, 4)
	t.Logf("weights 100/100/200/0 (draining), %d calls at concurrency 4, tolerance ±%.0f points: %v", n, 100*shareTolerance, got)
	if got.Failed != 0 {
		t.Fatalf("%d calls failed: %v", got.Failed, got.LastErr)
	}
	for i, want := range []float64{0.25, 0.25, 0.5} {
		if share := got.Share(bs[i].Addr); math.Abs(share-want) > shareTolerance {
			t.Errorf("weight %d backend: share %.2f%%, want %.0f%% ± %.0f", weights[i], 100*share, 100*want, 100*shareTolerance)
		}
	}
	if n := bs[3].Calls(); n != 0 {
		t.Errorf("draining backend got %d calls", n)
	}

	// A weight change reaches the picker: 400/100/200 gives 4/7, 1/7, 2/7.
	reg.Register(t, registry.Instance{Name: "greeter", ID: "i0", Addr: bs[0].Addr, Weight: 400})
	want := []float64{4.0 / 7, 1.0 / 7, 2.0 / 7}
	balancertest.CallUntil(t, conn, 10*time.Second, "the new weight applied", func(balancertest.Result) bool {
		return math.Abs(balancertest.Calls(conn, 70, 1).Share(bs[0].Addr)-want[0]) < 0.02
	})
	got = balancertest.Calls(conn, 3500, 4)
	t.Logf("weights changed to 400/100/200: %v", got)
	for i := range want {
		if share := got.Share(bs[i].Addr); math.Abs(share-want[i]) > shareTolerance {
			t.Errorf("after the weight change, backend %d: share %.2f%%, want %.1f%% ± %.0f", i, 100*share, 100*want[i], 100*shareTolerance)
		}
	}

	// A service whose instances all drain still serves, evenly.
	for i, b := range bs[:2] {
		reg.Register(t, registry.Instance{Name: "drained", ID: fmt.Sprint("d", i), Addr: b.Addr, Draining: true})
	}
	conn = balancertest.Dial(t, "muster:///drained", balancertest.ServiceConfig(wrr.Name, "", false), grpc.WithResolvers(reg.Builder))
	balancertest.CallUntil(t, conn, 10*time.Second, "both draining backends called", balancertest.ServedAll(bs[:2]...))
	got = balancertest.Calls(conn, 1000, 2)
	t.Logf("all instances draining: %v", got)
	if s := got.Share(bs[0].Addr); got.Failed != 0 || math.Abs(s-0.5) > shareTolerance {
		t.Errorf("all draining: first backend share %.2f%%, want 50%% ± %.0f; %d failed", 100*s, 100*shareTolerance, got.Failed)
	}
}

// Endpoints of another resolver weigh what the config's endpointWeights
// table says, by address; one it leaves out weighs 100.
func TestWeightsFromTheConfigTable(t *testing.T) {
	bs := balancertest.Backends(t, 3)
	target := fmt.Sprintf("direct:///%s,%s,%s", bs[0].Addr, bs[1].Addr, bs[2].Addr)
	config := fmt.Sprintf(`{"endpointWeights":{%q:200,%q:100}}`, bs[0].Addr, bs[2].Addr)
	conn := balancertest.Dial(t, target, balancertest.ServiceConfig(wrr.Name, config, false), grpc.WithResolvers(resolver.NewDirectBuilder()))
	balancertest.CallUntil(t, conn, 10*time.Second, "every backend called", balancertest.ServedAll(bs...))
	const n = 4000
	got := balancertest.Calls(conn, n, 4)
	t.Logf("table 200/(none)/100, %d calls at concurrency 4, tolerance ±%.0f points: %v", n, 100*shareTolerance, got)
	for i, want := range []float64{0.5, 0.25, 0.25} {
		if share := got.Share(bs[i].Addr); math.Abs(share-want) > shareTolerance {
			t.Errorf("backend %d: share %.2f%%, want %.0f%% ± %.0f", i, 100*share, 100*want, 100*shareTolerance)
		}
	}
}

func TestOtherResolversGetEqualWeights(t *testing.T) {
	bs := balancertest.Backends(t, 3)
	target := fmt.Sprintf("direct:///%s,%s,%s", bs[0].Addr, bs[1].Addr, bs[2].Addr)
	conn := balancertest.Dial(t, target, balancertest.ServiceConfig(wrr.Name, "", false), grpc.WithResolvers(resolver.NewDirectBuilder()))
	balancertest.CallUntil(t, conn, 10*time.Second, "every backend called", balancertest.ServedAll(bs...))
	// Weight 100 each: a plain round robin, exact but for a turn or two
	// should a connection flap and the picker restart at a random turn.
	got := balancertest.Calls(conn, 900, 1)
	for _, b := range bs {
		if n := got.By[b.Addr]; n < 298 || n > 302 {
			t.Fatalf("direct resolver, 900 sequential calls: %v; want 300 ± 2 each", got)
		}
	}
}

func TestColorRouting(t *testing.T) { balancersuite.ColorRouting(t, wrr.Name) }

func TestCanary(t *testing.T) { balancersuite.Canary(t, wrr.Name) }

func TestLocalityPrefersZone(t *testing.T) { balancersuite.LocalityPrefersZone(t, wrr.Name) }
func TestLocalitySpillsWhenFailing(t *testing.T) {
	balancersuite.LocalitySpillsWhenFailing(t, wrr.Name)
}
func TestLocalitySpillByCapacity(t *testing.T) { balancersuite.LocalitySpillByCapacity(t, wrr.Name) }
func TestLocalityRegionFailover(t *testing.T)  { balancersuite.LocalityRegionFailover(t, wrr.Name) }

func TestCircuitBreaking(t *testing.T) { balancersuite.CircuitBreaking(t, wrr.Name) }
func TestCanaryKeyHeader(t *testing.T) { balancersuite.CanaryKeyHeader(t, wrr.Name) }
func TestPolicyAffinity(t *testing.T)  { balancersuite.PolicyAffinity(t, wrr.Name) }
func TestPolicyOutlierEjection(t *testing.T) {
	balancersuite.PolicyOutlierEjection(t, wrr.Name, `{"outlier":{"consecutiveFailures":0}}`)
}
func TestSlowStart(t *testing.T) { balancersuite.SlowStart(t, wrr.Name, "", true) }
func TestSlowStartFollowsRegistration(t *testing.T) {
	balancersuite.SlowStartFollowsRegistration(t, wrr.Name)
}

func TestZoneFailsWithinEjection(t *testing.T) {
	t.Run("defaults", func(t *testing.T) { balancersuite.ZoneFailsWithinEjection(t, wrr.Name, false) })
	t.Run("short", func(t *testing.T) { balancersuite.ZoneFailsWithinEjection(t, wrr.Name, true) })
}
func TestZoneFailsWithColors(t *testing.T)   { balancersuite.ZoneFailsWithColors(t, wrr.Name) }
func TestZoneFailsWhileRamping(t *testing.T) { balancersuite.ZoneFailsWhileRamping(t, wrr.Name) }
func TestLevelSharesFollowEjection(t *testing.T) {
	balancersuite.LevelSharesFollowEjection(t, wrr.Name)
}
