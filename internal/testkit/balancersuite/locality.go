package balancersuite

import (
	"fmt"
	"github.com/musterhq/muster/internal/testkit/balancertest"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// localFleet is greeter in three zones over real etcd: zone z1 and z2 of
// region r1, z3 of region r2, with per backends each.
type localFleet struct {
	reg   *Registry
	zones map[string][]*testbackend.Backend
}

func startLocalFleet(t *testing.T, per int) *localFleet {
	t.Helper()
	f := &localFleet{reg: StartRegistry(t), zones: map[string][]*testbackend.Backend{}}
	for _, z := range []struct{ region, zone string }{{"r1", "z1"}, {"r1", "z2"}, {"r2", "z3"}} {
		for i, b := range balancertest.Backends(t, per) {
			f.reg.Register(t, registry.Instance{Name: "greeter", ID: fmt.Sprintf("%s-%d", z.zone, i), Addr: b.Addr,
				Region: z.region, Zone: z.zone, RegisteredAt: time.Now().Add(-time.Hour)})
			f.zones[z.zone] = append(f.zones[z.zone], b)
		}
	}
	return f
}

// dial opens a channel to greeter as a client in r1/z1 with the policy and
// its config, and waits until every backend of zones served a call.
func (f *localFleet) dial(t *testing.T, policy, config string, zones ...string) *grpc.ClientConn {
	t.Helper()
	b := f.reg.BuilderWith(resolver.WithRegion("r1"), resolver.WithZone("z1"))
	conn := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(policy, config, false), grpc.WithResolvers(b))
	var all []*testbackend.Backend
	for _, z := range zones {
		all = append(all, f.zones[z]...)
	}
	balancertest.CallUntil(t, conn, 20*time.Second, "every backend of "+fmt.Sprint(zones)+" called", balancertest.ServedAll(all...))
	return conn
}

// in returns how many calls of r zone served.
func (f *localFleet) in(r balancertest.Result, zone string) int {
	n := 0
	for _, b := range f.zones[zone] {
		n += r.By[b.Addr]
	}
	return n
}

// LocalityPrefersZone checks that a client in r1/z1 keeps every call in
// z1 while z1 is healthy: of 4,000 calls at least 99 % (the spill rule
// gives exactly 100 %: min(1, 1.4·1)), while round_robin over the same
// endpoints, in the same run, sends about a third there.
func LocalityPrefersZone(t *testing.T, policy string) {
	f := startLocalFleet(t, 3)
	conn := f.dial(t, policy, "", "z1")
	rr := f.dial(t, "round_robin", "", "z1", "z2", "z3")
	const n = 4000
	got, base := balancertest.Calls(conn, n, 4), balancertest.Calls(rr, n, 4)
	local, rrLocal := float64(f.in(got, "z1"))/n, float64(f.in(base, "z1"))/n
	t.Logf("%s: %.1f %% of %d calls in the client's zone (round_robin in the same run: %.1f %%)", policy, 100*local, n, 100*rrLocal)
	if got.Failed != 0 || local < 0.99 {
		t.Fatalf("%s: %.2f %% of the calls in z1, %d failed (%v); want at least 99 %%", policy, 100*local, got.Failed, got.LastErr)
	}
	if rrLocal > 0.5 {
		t.Fatalf("round_robin sent %.1f %% to z1; the comparison expects about a third", 100*rrLocal)
	}
}

// LocalitySpillsWhenFailing checks that a zone whose backends fail every
// call while staying registered loses its calls: outlier detection ejects
// them (5 failures in a row), the zone's healthy fraction falls to 0 and
// its share with it. From 3 s after the failures begin, for 1.5 s, at most
// 2 % of the calls go to z1 and none fails (the ejections, 6 s, outlast
// the window: no probe falls in it). Healed, z1 is probed when the
// ejections end and takes the calls back: within 5 s of the healing, 200
// calls in a row are all in z1.
func LocalitySpillsWhenFailing(t *testing.T, policy string) {
	f := startLocalFleet(t, 3)
	conn := f.dial(t, policy, `{"outlier":{"baseEjectionTime":"6s"}}`, "z1")
	start := time.Now()
	for _, b := range f.zones["z1"] {
		b.SetFailing(true)
	}
	warm := balancertest.CallsFor(conn, time.Until(start.Add(3*time.Second)), 4)
	t.Logf("the first 3 s of z1 failing: %d calls failed, %v", warm.Failed, warm)
	got := balancertest.CallsFor(conn, 1500*time.Millisecond, 4)
	share := float64(f.in(got, "z1")) / float64(max(got.OK+got.Failed, 1))
	t.Logf("%s: from 3 s to 4.5 s after z1 began failing: %.2f %% of %d calls in z1, %d failed", policy, 100*share, got.OK+got.Failed, got.Failed)
	if share > 0.02 || got.Failed != 0 {
		t.Fatalf("%s: z1 failing: %.2f %% of the calls in z1 and %d failed (%v); want at most 2 %% and none", policy, 100*share, got.Failed, got.LastErr)
	}
	for _, b := range f.zones["z1"] {
		b.SetFailing(false)
	}
	healed := time.Now()
	run, seen, inZ1 := 0, 0, 0
	balancertest.CallUntil(t, conn, 5*time.Second, "200 calls in a row in z1 within 5 s of healing it", func(r balancertest.Result) bool {
		// r counts every call so far: judge the newest one.
		if now := f.in(r, "z1"); r.OK > seen && now > inZ1 {
			run++
		} else if r.OK > seen {
			run = 0
		}
		seen, inZ1 = r.OK, f.in(r, "z1")
		return run >= 200
	})
	t.Logf("%s: back in z1 %v after the healing", policy, time.Since(healed).Round(time.Millisecond))
}

// LocalitySpillByCapacity checks the spill rule when z1 loses two of its
// three backends (crashed: their connections reset; still registered): its healthy fraction is 1/3,
// so it keeps min(1, 1.4/3) = 46.7 % of the calls and z2, the rest of the
// region, takes the other 53.3 %; z3 (another region) none. Each call
// draws its level independently, so z1's count of n calls is
// binomial(n, 0.467): the bound is ±5σ.
func LocalitySpillByCapacity(t *testing.T, policy string) {
	f := startLocalFleet(t, 3)
	conn := f.dial(t, policy, "", "z1")
	for _, b := range f.zones["z1"][1:] {
		b.Crash(t)
	}
	alive := f.zones["z1"][0]
	balancertest.CallUntil(t, conn, 20*time.Second, "calls in z2 once two of z1's backends stopped", balancertest.ServedAll(f.zones["z2"]...))
	balancertest.Calls(conn, 200, 4) // the stopped backends' connections are seen to fail
	const n, p = 4000, 1.4 / 3
	got := balancertest.Calls(conn, n, 4)
	sigma := math.Sqrt(n * p * (1 - p))
	lo, hi := int(n*p-5*sigma), int(n*p+5*sigma)
	z1 := got.By[alive.Addr]
	t.Logf("%s: z1 with 1 of 3 backends took %d of %d calls (%.1f %%; want %d..%d, 46.7 %% ± 5σ), z2 %d, z3 %d, failed %d",
		policy, z1, n, 100*float64(z1)/n, lo, hi, f.in(got, "z2"), f.in(got, "z3"), got.Failed)
	if z1 < lo || z1 > hi || f.in(got, "z3") != 0 || got.Failed != 0 {
		t.Fatalf("%s: z1 took %d of %d (want %d..%d), z3 %d (want 0), %d failed (%v); all: %v", policy, z1, n, lo, hi, f.in(got, "z3"), got.Failed, got.LastErr, got)
	}
}

// LocalityRegionFailover checks that when every backend of the client's
// region dies (crashed, still registered), calls move to the other
// region; the calls that fail are at most those in flight at the kill: one
// per caller and killed backend (a call sent on a connection whose end the
// client has not read yet).
func LocalityRegionFailover(t *testing.T, policy string) {
	f := startLocalFleet(t, 2)
	conn := f.dial(t, policy, "", "z1")
	const callers = 4
	done := make(chan balancertest.Result)
	go func() { done <- balancertest.CallsFor(conn, 3*time.Second, callers) }()
	time.Sleep(500 * time.Millisecond) // let the callers run before the kill; not a synchronisation
	for _, z := range []string{"z1", "z2"} {
		for _, b := range f.zones[z] {
			b.Crash(t)
		}
	}
	got := <-done
	killed := len(f.zones["z1"]) + len(f.zones["z2"])
	t.Logf("%s: r1 killed during the calls: %v; z3 served %d", policy, got, f.in(got, "z3"))
	if got.Failed > callers*killed {
		t.Fatalf("%s: %d calls failed, want at most %d (in flight at the kill: %d callers × %d backends); last %v",
			policy, got.Failed, callers*killed, callers, killed, got.LastErr)
	}
	after := balancertest.Calls(conn, 500, callers)
	if f.in(after, "z3") != 500 {
		t.Fatalf("%s: after r1 died: %v, want every call in z3", policy, after)
	}
}
