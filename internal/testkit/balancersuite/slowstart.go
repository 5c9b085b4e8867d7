package balancersuite

import (
	"github.com/musterhq/muster/internal/testkit/balancertest"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/registry"
)

// slowStartConfig ramps over 10 s, linearly, from 10 % of the weight.
const slowStartConfig = `"slowStart":{"window":"10s","aggression":1,"minWeightPercent":10}`

// SlowStart checks slow start over real backends and real etcd: two
// instances registered an hour ago and a third registered as the
// measurement starts, equal weights, calls from 4 goroutines. With a 10 s
// linear ramp from 10 %, the new instance's weight factor is 0.1 for its
// first second and 0.1..0.2 in the next, so its share of calls in its
// first 2 s is at most 0.2/2.2 = 9 %; a policy that follows weights
// exactly (exact: muster_wrr) gets at least 0.1/2.1 = 4.8 % of the calls
// made while it is READY (a few tens of ms go to connecting), and 4..6 s
// into the ramp between 0.4/2.4 = 17 % and 0.6/2.6 = 23 %: the picker is
// rebuilt as the ramp goes on. The bounds allow 3 percentage points for
// the calls of the measurement's edges. Without slow start (the
// contender, in the same run) the new instance takes its full third at
// once. extra is more of the balancer config (e.g. `"decayTime":"1s"`),
// or "".
func SlowStart(t *testing.T, policy, extra string, exact bool) {
	cfg := func(slow bool) string {
		parts := ""
		if slow {
			parts = slowStartConfig
		}
		if extra != "" {
			if parts != "" {
				parts += ","
			}
			parts += extra
		}
		return "{" + parts + "}"
	}
	reg := StartRegistry(t)
	bs := balancertest.Backends(t, 3)
	old := time.Now().Add(-time.Hour)
	for i, b := range bs[:2] {
		reg.Register(t, registry.Instance{Name: "greeter", ID: string(rune('a' + i)), Addr: b.Addr, RegisteredAt: old})
	}
	slow := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(policy, cfg(true), false), grpc.WithResolvers(reg.Builder))
	plain := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(policy, cfg(false), false), grpc.WithResolvers(reg.Builder))
	balancertest.CallUntil(t, slow, 10*time.Second, "the old backends serving", balancertest.ServedAll(bs[:2]...))
	balancertest.CallUntil(t, plain, 10*time.Second, "the old backends serving", balancertest.ServedAll(bs[:2]...))

	young := bs[2]
	registered := time.Now()
	reg.Register(t, registry.Instance{Name: "greeter", ID: "c", Addr: young.Addr, RegisteredAt: registered})
	type result struct {
		first, mid balancertest.Result
	}
	measure := func(conn *grpc.ClientConn) result {
		var r result
		r.first = balancertest.CallsFor(conn, time.Until(registered.Add(2*time.Second)), 4)
		if d := time.Until(registered.Add(4 * time.Second)); d > 0 {
			time.Sleep(d) // the ramp's clock, not a synchronisation
		}
		r.mid = balancertest.CallsFor(conn, time.Until(registered.Add(6*time.Second)), 4)
		return r
	}
	done := make(chan result, 1)
	go func() { done <- measure(plain) }()
	got := measure(slow)
	contender := <-done
	first, mid := got.first.Share(young.Addr), got.mid.Share(young.Addr)
	t.Logf("%s with slow start: the new backend's share %.1f%% in its first 2 s (%v), %.1f%% at 4..6 s (%v)",
		policy, 100*first, got.first, 100*mid, got.mid)
	t.Logf("%s without: %.1f%% in its first 2 s, %.1f%% at 4..6 s", policy,
		100*contender.first.Share(young.Addr), 100*contender.mid.Share(young.Addr))
	if got.first.Failed+got.mid.Failed+contender.first.Failed+contender.mid.Failed > 0 {
		t.Fatalf("failed calls: %v; %v", got.first.LastErr, got.mid.LastErr)
	}
	// A policy that follows weights exactly gives the new backend its
	// third at once; muster_p2c by its latency, which a loaded machine
	// bends: 15 % is still more than the ramp's 9 % bound.
	floor := 0.25
	if !exact {
		floor = 0.15
	}
	if c := contender.first.Share(young.Addr); c < floor {
		t.Fatalf("without slow start the new backend got %.1f%% in its first 2 s, want at least %.0f%% (its third): the test cannot tell the ramp", 100*c, 100*floor)
	}
	if first > 0.12 {
		t.Fatalf("with slow start the new backend got %.1f%% of the calls in its first 2 s, want at most 12%% (9%% by the ramp)", 100*first)
	}
	if !exact {
		return
	}
	if first < 0.02 {
		t.Fatalf("with slow start the new backend got %.1f%% of the calls in its first 2 s, want at least 2%% (4.8%% by the ramp)", 100*first)
	}
	if mid < 0.14 || mid > 0.26 {
		t.Fatalf("with slow start the new backend got %.1f%% of the calls 4..6 s into its ramp, want 14..26%% (17..23%% by the ramp)", 100*mid)
	}
}

// SlowStartFollowsRegistration checks that the ramp counts from the
// instance's registration time, not from when the client saw it: a client
// started after one instance was registered an hour ago, one 20 s ago (its
// window is 10 s) and one just now gives the first two their full shares
// at once and ramps only the third (at most its ramped share where the
// calls end, 12 % in the first 2 s, as in SlowStart). A client that ramped
// from when it saw them would give all three a third.
func SlowStartFollowsRegistration(t *testing.T, policy string) {
	reg := StartRegistry(t)
	bs := balancertest.Backends(t, 3)
	ages := []time.Duration{time.Hour, 20 * time.Second, 0}
	registered := time.Now()
	for i, b := range bs {
		reg.Register(t, registry.Instance{Name: "greeter", ID: string(rune('a' + i)), Addr: b.Addr,
			RegisteredAt: registered.Add(-ages[i])})
	}
	conn := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(policy, "{"+slowStartConfig+"}", false), grpc.WithResolvers(reg.Builder))
	balancertest.CallUntil(t, conn, 10*time.Second, "the older backends serving", balancertest.ServedAll(bs[:2]...))
	got := balancertest.CallsFor(conn, time.Second, 4)
	// The ramp's bound where the calls ended: 12 % while that is within
	// 2 s of the registration (9 % by the ramp); a loaded machine may take
	// seconds to get there, and the ramp goes on meanwhile (10 s, linear
	// from 10 %): its share f/(2+f) plus 5 points of muster_p2c's latency
	// noise, below the 25 % that would be no ramp at all.
	ramp := min(1, max(0.1, time.Since(registered).Seconds()/10))
	bound := min(0.25, max(0.12, ramp/(2+ramp)+0.05))
	older, young := got.Share(bs[1].Addr), got.Share(bs[2].Addr)
	t.Logf("%s: the backend registered 20 s before the client got %.1f%%, the one registered with it %.1f%% (ramp factor %.2f at the end: bound %.1f%%; %v)",
		policy, 100*older, 100*young, ramp, 100*bound, got)
	if older < 0.25 || young > bound {
		t.Fatalf("the backend registered 20 s before the client got %.1f%% of the calls, the one registered with it %.1f%%; "+
			"want at least 25%% (its full share) and at most %.1f%% (ramping, factor %.2f)", 100*older, 100*young, 100*bound, ramp)
	}
}
