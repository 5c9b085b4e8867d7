package xds_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "github.com/musterhq/muster/balancer/wrr" // registers muster_wrr
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/xds"
)

// With WithPolicy(MusterWRR), a Go client that imports Muster's wrr
// balancer balances the xDS cluster with muster_wrr: the balancer's own
// per-endpoint metrics (reported only by Muster's balancers, with their
// policy name) count the calls.
func TestMusterPolicy(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithPolicy(xds.MusterWRR))
	a, b := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	bc := metrics.NewBalancerCollector(nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(bc)
	conn, err := grpc.NewClient("xds:///greeter", grpc.WithResolvers(e.xdsResolver(t, "wrr-client", "")),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(bc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	callUntil(t, conn, "calling a and b", hasAll(a.Addr, b.Addr))
	calls(t, conn, 100)

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var picked float64
	for _, f := range fams {
		if f.GetName() != "muster_balancer_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == "muster_wrr" {
					picked += m.GetCounter().GetValue()
				}
			}
		}
	}
	if picked < 100 {
		n, _ := testutil.GatherAndCount(reg)
		t.Fatalf("muster_wrr counted %v calls, want >= 100: the channel does not balance with it (%d series)", picked, n)
	}
	t.Logf("muster_wrr counted %v calls", picked)
	noNACK(t, e.cp)
}

// A client without the policy's balancer falls back to round robin: its
// calls reach every instance, and it accepts the cluster (no NACK).
func TestCustomPolicyFallback(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithPolicy(xds.CustomPolicy("not_registered_here")))
	a, b := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	conn := e.dial(t, "greeter", "client-1", "")
	callUntil(t, conn, "calling a and b", hasAll(a.Addr, b.Addr))
	if got := calls(t, conn, 200); got[a.Addr] != 100 || got[b.Addr] != 100 {
		t.Errorf("round robin fallback: %v, want 100 calls each", got)
	}
	noNACK(t, e.cp)
}
