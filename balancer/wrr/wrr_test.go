package wrr

import (
	"math"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/musterhq/muster/balancer/internal/lb"
	"github.com/musterhq/muster/internal/testkit/balancertest"
	"github.com/musterhq/muster/internal/testkit/testbackend"

	"google.golang.org/grpc"
)

func manualConn(t *testing.T, config string, health bool, bs ...*testbackend.Backend) *grpc.ClientConn {
	t.Helper()
	r := manual.NewBuilderWithScheme("wrrtest")
	r.InitialState(grpcresolver.State{Endpoints: balancertest.Endpoints(bs...)})
	return balancertest.Dial(t, r.Scheme()+":///svc", balancertest.ServiceConfig(capture.Name(), config, health), grpc.WithResolvers(r))
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
