package wrr

import (
	"fmt"
	"math"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/musterhq/muster/balancer/internal/lb"
	"github.com/musterhq/muster/internal/testkit/balancertest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"

	"google.golang.org/grpc"
)

func manualConn(t *testing.T, config string, health bool, bs ...*testbackend.Backend) *grpc.ClientConn {
	t.Helper()
	r := manual.NewBuilderWithScheme("wrrtest")
	r.InitialState(grpcresolver.State{Endpoints: balancertest.Endpoints(bs...)})
	return balancertest.Dial(t, r.Scheme()+":///svc", balancertest.ServiceConfig(capture.Name(), config, health), grpc.WithResolvers(r))
}

// shareTolerance is the largest difference, in share of all calls,
// allowed between a backend's share and its weight's. The sequence is
// exact over each period, so the only slack needed is for the partial
// period at each end of the run and for picks made while a connection is
// briefly not ready.
const shareTolerance = 0.02

func TestWeightsFromTheMusterResolver(t *testing.T) {
	reg := balancertest.StartRegistry(t)
	bs := balancertest.Backends(t, 4)
	weights := []int{100, 100, 200, 0} // the last one draining
	for i, b := range bs {
		in := registry.Instance{Name: "greeter", ID: fmt.Sprint("i", i), Addr: b.Addr, Weight: weights[i], Draining: weights[i] == 0}
		reg.Register(t, in)
	}
	conn := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(Name, "", false), grpc.WithResolvers(reg.Builder))
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
	conn = balancertest.Dial(t, "muster:///drained", balancertest.ServiceConfig(Name, "", false), grpc.WithResolvers(reg.Builder))
	balancertest.CallUntil(t, conn, 10*time.Second, "both draining backends called", balancertest.ServedAll(bs[:2]...))
	got = balancertest.Calls(conn, 1000, 2)
	t.Logf("all instances draining: %v", got)
	if s := got.Share(bs[0].Addr); got.Failed != 0 || math.Abs(s-0.5) > shareTolerance {
		t.Errorf("all draining: first backend share %.2f%%, want 50%% ± %.0f; %d failed", 100*s, 100*shareTolerance, got.Failed)
	}
}

func TestFailingBackendIsEjectedAndProbedOncePerPeriod(t *testing.T) {
	const base = 100 * time.Millisecond
	bs := balancertest.Backends(t, 3)
	bad := bs[0]
	conn := manualConn(t, `{"outlier":{"baseEjectionTime":"100ms","maxEjectionTime":"10s"}}`, false, bs...)
	balancertest.CallUntil(t, conn, 10*time.Second, "every backend called", balancertest.ServedAll(bs...))
	var st *lb.OutlierState
	for _, e := range built(t).Endpoints() {
		if e.Addr == bad.Addr {
			st = &e.Outlier
		}
	}

	bad.SetFailing(true)
	bad.ResetCalls()
	var ejectedAfter time.Time // a time before the call that ejected it
	balancertest.CallUntil(t, conn, 10*time.Second, "the failing backend ejected", func(balancertest.Result) bool {
		if st.Ejected() {
			return true
		}
		ejectedAfter = time.Now()
		return false
	})
	if n := bad.Calls(); n != lb.DefaultConsecutiveFailures {
		t.Fatalf("failing backend got %d calls before its ejection, want %d", n, lb.DefaultConsecutiveFailures)
	}

	// Then at most one call (the probe) per ejection period that ended:
	// ejection k lasts k×base, so m periods end within m(m+1)/2×base.
	bad.ResetCalls()
	got := balancertest.CallsFor(conn, 1500*time.Millisecond, 2)
	elapsed := time.Since(ejectedAfter)
	periods := 0
	for k := 1; time.Duration(k*(k+1)/2)*base <= elapsed; k++ {
		periods = k
	}
	probes := int(bad.Calls())
	t.Logf("over %v since the ejection: %d probes, at most %d ejection periods ended; %v", elapsed.Round(time.Millisecond), probes, periods, got)
	if probes > periods || probes == 0 {
		t.Fatalf("ejected backend got %d calls in %v, want 1..%d (one probe per ejection period ended)", probes, elapsed, periods)
	}
	if got.Failed != probes {
		t.Fatalf("%d calls failed, want only the %d probes", got.Failed, probes)
	}
	// The others shared its turns evenly.
	if s := got.Share(bs[1].Addr); math.Abs(s-0.5) > 0.05 {
		t.Fatalf("with one of three ejected, a healthy backend's share is %.1f%%, want 50%% ± 5", 100*s)
	}
}

func TestNotServingBackendGetsNoCalls(t *testing.T) {
	bs := balancertest.Backends(t, 3)
	sick := bs[1]
	conn := manualConn(t, "", true, bs...)
	balancertest.CallUntil(t, conn, 10*time.Second, "every backend called", balancertest.ServedAll(bs...))

	sick.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	balancertest.CallUntil(t, conn, 10*time.Second, "100 calls in a row without the NOT_SERVING backend", balancertest.NotServedLast(sick, 100))
	sick.ResetCalls()
	got := balancertest.Calls(conn, 300, 3)
	if sick.Calls() != 0 || got.Failed != 0 {
		t.Fatalf("NOT_SERVING backend got %d of 300 calls (%v)", sick.Calls(), got)
	}
	sick.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	balancertest.CallUntil(t, conn, 10*time.Second, "the backend called again once SERVING", balancertest.ServedAll(sick))
}

// Endpoints of another resolver weigh what the config's endpointWeights
// table says, by address; one it leaves out weighs 100.
func TestWeightsFromTheConfigTable(t *testing.T) {
	bs := balancertest.Backends(t, 3)
	target := fmt.Sprintf("direct:///%s,%s,%s", bs[0].Addr, bs[1].Addr, bs[2].Addr)
	config := fmt.Sprintf(`{"endpointWeights":{%q:200,%q:100}}`, bs[0].Addr, bs[2].Addr)
	conn := balancertest.Dial(t, target, balancertest.ServiceConfig(Name, config, false), grpc.WithResolvers(resolver.NewDirectBuilder()))
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
	conn := balancertest.Dial(t, target, balancertest.ServiceConfig(Name, "", false), grpc.WithResolvers(resolver.NewDirectBuilder()))
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

func TestColorRouting(t *testing.T) { balancertest.ColorRouting(t, Name) }

func TestCanary(t *testing.T) { balancertest.Canary(t, Name) }

func TestLocalityPrefersZone(t *testing.T)       { balancertest.LocalityPrefersZone(t, Name) }
func TestLocalitySpillsWhenFailing(t *testing.T) { balancertest.LocalitySpillsWhenFailing(t, Name) }
func TestLocalitySpillByCapacity(t *testing.T)   { balancertest.LocalitySpillByCapacity(t, Name) }
func TestLocalityRegionFailover(t *testing.T)    { balancertest.LocalityRegionFailover(t, Name) }

func TestCircuitBreaking(t *testing.T) { balancertest.CircuitBreaking(t, Name) }
func TestCanaryKeyHeader(t *testing.T) { balancertest.CanaryKeyHeader(t, Name) }
func TestPolicyAffinity(t *testing.T)  { balancertest.PolicyAffinity(t, Name) }
func TestPolicyOutlierEjection(t *testing.T) {
	balancertest.PolicyOutlierEjection(t, Name, `{"outlier":{"consecutiveFailures":0}}`)
}
func TestSlowStart(t *testing.T) { balancertest.SlowStart(t, Name, "", true) }
func TestSlowStartFollowsRegistration(t *testing.T) {
	balancertest.SlowStartFollowsRegistration(t, Name)
}

func TestZoneFailsWithinEjection(t *testing.T) {
	t.Run("defaults", func(t *testing.T) { balancertest.ZoneFailsWithinEjection(t, Name, false) })
	t.Run("short", func(t *testing.T) { balancertest.ZoneFailsWithinEjection(t, Name, true) })
}
func TestZoneFailsWithColors(t *testing.T)   { balancertest.ZoneFailsWithColors(t, Name) }
func TestZoneFailsWhileRamping(t *testing.T) { balancertest.ZoneFailsWhileRamping(t, Name) }
