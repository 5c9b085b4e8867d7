package p2c_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/balancer/p2c"
	"github.com/musterhq/muster/internal/testkit/balancersuite"
	"github.com/musterhq/muster/internal/testkit/balancertest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// The tests here run muster_p2c behind the Muster resolver, which imports
// this package (it names muster_p2c as its default): they are in the
// external test package.

func TestWeightsAndDrainingFromTheMusterResolver(t *testing.T) {
	reg := balancersuite.StartRegistry(t)
	bs := balancertest.Backends(t, 3)
	weights := []int{100, 1000, 0}
	for i, b := range bs {
		in := registry.Instance{Name: "greeter", ID: fmt.Sprint("i", i), Addr: b.Addr, Weight: weights[i]}
		if weights[i] == 0 {
			in.Draining = true
		}
		reg.Register(t, in)
	}
	conn := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(p2c.CaptureName(), "", false), grpc.WithResolvers(reg.Builder))
	// The weight-100 backend may lose every comparison while calls run
	// one at a time: wait for both in the picker, not for both called.
	balancertest.CallUntil(t, conn, 10*time.Second, "the weight-1000 backend called", balancertest.ServedAll(bs[1]))
	p2c.WaitFor(t, "both weighted backends in the picker", func() bool { return p2c.InPicker(bs[0].Addr) && p2c.InPicker(bs[1].Addr) })
	bs[2].ResetCalls()
	// The weight divides the score: with similar latencies the weight-1000
	// backend takes the larger share (it loses a comparison only when its
	// cost × calls in flight is 10 times the other's); the draining one
	// takes none.
	got := balancertest.Calls(conn, 3000, 4)
	t.Logf("weights 100/1000/0 (draining): %v", got)
	if bs[2].Calls() != 0 {
		t.Fatalf("draining backend got %d calls", bs[2].Calls())
	}
	if w1, w10 := got.Share(bs[0].Addr), got.Share(bs[1].Addr); w10 <= w1 {
		t.Fatalf("weight 1000 backend share %.1f%% is not above weight 100's %.1f%%", 100*w10, 100*w1)
	}
	if got.Failed != 0 {
		t.Fatalf("%d calls failed: %v", got.Failed, got.LastErr)
	}
}

func TestWorksWithTheDirectResolver(t *testing.T) {
	bs := balancertest.Backends(t, 3)
	target := fmt.Sprintf("direct:///%s,%s,%s", bs[0].Addr, bs[1].Addr, bs[2].Addr)
	conn := balancertest.Dial(t, target, balancertest.ServiceConfig(p2c.Name, "", false), grpc.WithResolvers(resolver.NewDirectBuilder()))
	balancertest.CallUntil(t, conn, 10*time.Second, "every backend called", balancertest.ServedAll(bs...))
}

func TestColorRouting(t *testing.T) { balancersuite.ColorRouting(t, p2c.Name) }

func TestCanary(t *testing.T) { balancersuite.Canary(t, p2c.Name) }

func TestLocalityPrefersZone(t *testing.T) { balancersuite.LocalityPrefersZone(t, p2c.Name) }
func TestLocalitySpillsWhenFailing(t *testing.T) {
	balancersuite.LocalitySpillsWhenFailing(t, p2c.Name)
}
func TestLocalitySpillByCapacity(t *testing.T) { balancersuite.LocalitySpillByCapacity(t, p2c.Name) }
func TestLocalityRegionFailover(t *testing.T)  { balancersuite.LocalityRegionFailover(t, p2c.Name) }

func TestCircuitBreaking(t *testing.T) { balancersuite.CircuitBreaking(t, p2c.Name) }
func TestCanaryKeyHeader(t *testing.T) { balancersuite.CanaryKeyHeader(t, p2c.Name) }
func TestPolicyAffinity(t *testing.T)  { balancersuite.PolicyAffinity(t, p2c.Name) }
func TestPolicyOutlierEjection(t *testing.T) {
	balancersuite.PolicyOutlierEjection(t, p2c.Name, `{"decayTime":"50ms","outlier":{"consecutiveFailures":0}}`)
}
func TestSlowStart(t *testing.T) { balancersuite.SlowStart(t, p2c.Name, "", false) }
func TestSlowStartFollowsRegistration(t *testing.T) {
	balancersuite.SlowStartFollowsRegistration(t, p2c.Name)
}

func TestZoneFailsWithinEjection(t *testing.T) {
	t.Run("defaults", func(t *testing.T) { balancersuite.ZoneFailsWithinEjection(t, p2c.Name, false) })
	t.Run("short", func(t *testing.T) { balancersuite.ZoneFailsWithinEjection(t, p2c.Name, true) })
}
func TestZoneFailsWithColors(t *testing.T)   { balancersuite.ZoneFailsWithColors(t, p2c.Name) }
func TestZoneFailsWhileRamping(t *testing.T) { balancersuite.ZoneFailsWhileRamping(t, p2c.Name) }
func TestLevelSharesFollowEjection(t *testing.T) {
	balancersuite.LevelSharesFollowEjection(t, p2c.Name)
}
