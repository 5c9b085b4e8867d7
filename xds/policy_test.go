package xds_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "github.com/musterhq/muster/balancer/p2c" // registers muster_p2c
	_ "github.com/musterhq/muster/balancer/wrr" // registers muster_wrr
	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// With WithLBPolicy(MusterWRR), a Go client that imports Muster's wrr
// balancer balances the xDS cluster with muster_wrr: the balancer's own
// per-endpoint metrics (reported only by Muster's balancers, with their
// policy name) count the calls.
func TestMusterPolicy(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.MusterWRR))
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
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.CustomLBPolicy("not_registered_here")))
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

// wrrTolerance is the tolerance on shares of calls balanced by muster_wrr,
// in share of all calls. The policy is deterministic: its sequence gives
// each endpoint exactly its weight's share over each period (4 calls for
// weights 1:1:2, 7 for 4:1:2), so sequential calls miss it by less than a
// period's calls, plus one period each time the picker is rebuilt (it
// restarts at a random turn): 80 calls out of 4,000 allow twenty rebuilds.
// The load of the machine changes nothing but time. Round robin, what the
// balancer does without the weights, would be 8 points off for weights
// 100/100/200.
const wrrTolerance = 0.02

// sharesUntil makes calls until a window of the given number of
// consecutive calls has each address's share within wrrTolerance, failing
// after callUntil's 15 s.
func sharesUntil(t *testing.T, conn *grpc.ClientConn, what string, wants []share, window int) {
	t.Helper()
	last := "none"
	defer func() {
		if t.Failed() {
			t.Logf("the last window of %s", last)
		}
	}()
	callUntil(t, conn, what, func(c map[string]int) bool {
		n := 0
		for _, k := range c {
			n += k
		}
		if n < window {
			return false
		}
		ok, desc := sharesWithin(c, wants, wrrTolerance)
		last = desc
		clear(c)
		return ok
	})
}

// Through xDS, muster_wrr balances by the registry's weights (carried in
// the Cluster's balancer config), and an operator's weight override changes
// the shares live.
func TestMusterPolicyWeights(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.MusterWRR))
	a, b, c := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 100, false)
	e.register(t, "greeter", "b", b.Addr, "", 100, false)
	e.register(t, "greeter", "c", c.Addr, "", 200, false)
	conn := e.dial(t, "greeter", "wrr-client", "")
	// The client may have connected before the control plane saw every
	// registration: wait for one period's worth of windows to match.
	before := []share{{a.Addr, 0.25}, {b.Addr, 0.25}, {c.Addr, 0.50}}
	sharesUntil(t, conn, "calls in shares 25/25/50", before, 400)
	checkShares(t, calls(t, conn, 4000), before, wrrTolerance)

	pushed := e.cp.Stats().Pushes["greeter"]
	w := 400
	changed := time.Now()
	if err := etcd.SetOverride(ctxFor(t, 10*time.Second), e.cli, "greeter", "a", registry.Override{Weight: &w}, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	after := []share{{a.Addr, 4.0 / 7}, {b.Addr, 1.0 / 7}, {c.Addr, 2.0 / 7}}
	sharesUntil(t, conn, "calls in shares 4/7, 1/7, 2/7 after the override", after, 700)
	t.Logf("weight override 100 → 400 followed within %v", time.Since(changed).Round(time.Millisecond))
	checkShares(t, calls(t, conn, 4000), after, wrrTolerance)
	if got := e.cp.Stats().Pushes["greeter"]; got.Clusters <= pushed.Clusters {
		t.Errorf("pushes %+v after the weight change, %+v before: want the Cluster pushed again", got, pushed)
	}
	noNACK(t, e.cp)
}

// A weight change pushes the changed service's Cluster and endpoints and
// nothing of another service; a registration at the default weight does
// not push the Cluster (the table lists only other weights).
func TestWeightChangePushesItsClusterOnly(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter", "other"), xds.WithLBPolicy(xds.MusterP2C))
	a, b := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 100, false)
	e.register(t, "other", "a", a.Addr, "", 300, false)
	r := e.xdsResolver(t, "client-1", "")
	for _, svc := range []string{"greeter", "other"} {
		callUntil(t, dialWith(t, r, svc), "calling "+svc, hasAll(a.Addr))
	}
	base := e.cp.Stats()

	step := func(what string, change func(), more func(*xds.Pushes)) {
		t.Helper()
		prev := e.cp.Stats()
		want := prev.Pushes["greeter"]
		more(&want)
		change()
		n := want.Total() - prev.Pushes["greeter"].Total()
		st := waitStats(t, e.cp, what+" sent and acknowledged", func(st xds.Stats) bool {
			return st.Pushes["greeter"].Total() >= want.Total() && st.ACKs >= prev.ACKs+n
		})
		if got := st.Pushes["greeter"]; got != want {
			t.Errorf("%s: greeter pushes %+v, want %+v", what, got, want)
		}
	}
	step("a registration at the default weight", func() { e.register(t, "greeter", "b", b.Addr, "", 0, false) },
		func(p *xds.Pushes) { p.Endpoints++ })
	step("a weight change", func() { e.register(t, "greeter", "b", b.Addr, "", 250, false) },
		func(p *xds.Pushes) { p.Endpoints++; p.Clusters++ })
	if got := e.cp.Stats().Pushes["other"]; got != base.Pushes["other"] {
		t.Errorf("other service: pushes %+v, want %+v (unchanged)", got, base.Pushes["other"])
	}
	noNACK(t, e.cp)
}

// Through xDS, muster_p2c divides its scores by the registry's weights too.
// Of three backends, the heavy one (weight 10000) answers 1 ms later than
// the two others (weight 100), whose loopback calls take a fraction of a
// millisecond. Each sequential call draws two backends at random and takes
// the one of lower latency / weight. Without the weights the heavy one
// loses nearly every draw (p2c's own tests show how slowness is avoided);
// with them it wins every draw it is in (its 1 ms over 100 would have to
// beat a call of under 10 µs), which is 2/3 of the draws: about 67 % of
// the calls (measured: 62-67 % in runs beside other work). The bound, 50 %,
// is 15 binomial standard deviations (1.1 points over 2,000 calls) below
// 67 %; load slows all three backends, which the factor of 100 absorbs
// unless a light one's call got 100 times faster than the heavy one's.
func TestMusterP2CWeights(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.MusterP2C))
	heavy, a, b := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	heavy.SetDelay(time.Millisecond)
	e.register(t, "greeter", "heavy", heavy.Addr, "", registry.MaxWeight, false)
	e.register(t, "greeter", "a", a.Addr, "", 100, false)
	e.register(t, "greeter", "b", b.Addr, "", 100, false)
	conn := e.dial(t, "greeter", "p2c-client", "")
	callUntil(t, conn, "calling every backend", hasAll(heavy.Addr, a.Addr, b.Addr))
	// Wait for the weights: a window of 500 calls with most to heavy.
	callUntil(t, conn, "most calls to the heavy backend", func(c map[string]int) bool {
		n := c[heavy.Addr] + c[a.Addr] + c[b.Addr]
		if n < 500 {
			return false
		}
		ok := c[heavy.Addr]*2 > n
		clear(c)
		return ok
	})
	const n = 2000
	got := calls(t, conn, n)
	share := float64(got[heavy.Addr]) / n
	t.Logf("weights 10000/100/100, %d calls: heavy %.1f %% (about 67 %% expected, near 0 without weights): %v", n, 100*share, got)
	if share < 0.5 {
		t.Errorf("the backend of weight 10000 got %.1f %% of the calls, want more than 50 %%", 100*share)
	}
	noNACK(t, e.cp)
}
