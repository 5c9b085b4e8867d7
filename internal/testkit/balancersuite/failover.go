package balancersuite

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/internal/testkit/balancertest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
)

// ShortEjections is the outlier config of the failover tests with short
// ejections: 1 s, then 2 s each.
const ShortEjections = `"outlier":{"baseEjectionTime":"1s","maxEjectionTime":"2s"}`

// failoverCallers is how many goroutines call during a failover test.
const failoverCallers = 8

// failedBound returns the most failed calls an endpoint that fails every
// call from the start of a run of d may receive under the ejection rule
// with ejections of base, then max each: the consecutiveFailures (5) that
// eject it, the calls in flight at that moment (each other caller has at
// most one), and one probe per ejection end within d.
func failedBound(d, base, max time.Duration) int {
	ends := 0
	for at := base; at <= d; at += max {
		ends++
	}
	return 5 + failoverCallers - 1 + ends
}

// checkFailed fails the test when a backend of bs failed more calls than
// bound (the calls it received since its count was reset, with no call in
// flight, less those of them that succeeded in r), or when a call of r
// failed elsewhere than at bs.
func checkFailed(t *testing.T, policy string, bs []*testbackend.Backend, r balancertest.Result, bound int) {
	t.Helper()
	reached := 0
	defer func() {
		// Every failed call failed at a failing backend: none failed in
		// the picker for want of an admissible endpoint to pass it to.
		if r.Failed != reached {
			t.Errorf("%s: %d calls failed, %d of them at the failing backends; the others found no endpoint (last error %v)",
				policy, r.Failed, reached, r.LastErr)
		}
	}()
	for _, b := range bs {
		n := int(b.Calls()) - r.By[b.Addr]
		reached += n
		t.Logf("%s: %s failed %d calls (bound %d)", policy, b.Addr, n, bound)
		if n > bound {
			t.Errorf("%s: %s failed %d calls, want at most %d (5 before its ejection, %d in flight then, one probe per ejection end)",
				policy, b.Addr, n, bound, failoverCallers-1)
		}
	}
}

// arrivalSlack is how much later than the instant the ejection rule fixes
// a call may arrive at a failing backend: the rule acts on the client when
// a failed call comes back, which the backend sees only as the time the
// call arrived. A round trip (pick, arrival, failure back, Done) on
// loopback takes under 10 ms on an idle machine; 500 ms allows 50 times
// that for a loaded 2-core machine under -race.
const arrivalSlack = 500 * time.Millisecond

// ejectionTimeline checks when calls arrived at a backend that fails every
// call (at: its arrival times in order, from its first failure on) against
// the ejection rule, with ejections of base, then k·base up to max, for
// calls made until stop. From the backend the rule reads:
//   - its ejection starts when the client records the fifth failure: after
//     the fifth call arrived (exact: the failure follows the arrival on one
//     monotonic clock) and at most a round trip (arrivalSlack) later;
//   - until then calls arrive freely; then the calls in flight (each other
//     caller has at most one) arrive, within arrivalSlack of the fifth:
//     at most 5 + 7 calls in all;
//   - none arrives before the ejection can end (base after the fifth):
//     the first one after is its probe, which arrives within arrivalSlack
//     of the end when calls go on until then;
//   - the probe's failure ejects it again from after the probe's arrival,
//     for the next period: no call arrives within that period of the
//     probe, the next one is the next probe, and so on.
//
// It returns how many probes arrived and a description of each call that
// broke the rule.
func ejectionTimeline(at []time.Time, stop time.Time, base, max time.Duration) (probes int, bad []string) {
	const threshold = 5 // consecutiveFailures
	if len(at) < threshold {
		return 0, nil // never ejected
	}
	fifth := at[threshold-1]
	end := fifth.Add(base)
	i := threshold
	for ; i < len(at) && at[i].Before(end); i++ {
		if d := at[i].Sub(fifth); d > arrivalSlack {
			bad = append(bad, fmt.Sprintf("a call arrived %v after the 5th failure, while ejected (only calls in flight at the ejection may, within %v)", d, arrivalSlack))
		}
	}
	if i > threshold+failoverCallers-1 {
		bad = append(bad, fmt.Sprintf("%d calls arrived before the ejection could end, want at most %d (the failures that eject it, the calls in flight then)", i, threshold+failoverCallers-1))
	}
	for k := 2; ; k++ {
		if i == len(at) {
			if end.Add(arrivalSlack).Before(stop) {
				bad = append(bad, fmt.Sprintf("no probe after the ejection that ended %v before the calls stopped", stop.Sub(end).Round(time.Millisecond)))
			}
			return probes, bad
		}
		probe := at[i]
		if late := probe.Sub(end); late > arrivalSlack {
			bad = append(bad, fmt.Sprintf("probe %d arrived %v after its ejection could end, want within %v", probes+1, late.Round(time.Millisecond), arrivalSlack))
		}
		probes++
		period := min(time.Duration(k)*base, max)
		end = probe.Add(period)
		for i++; i < len(at) && at[i].Before(end); i++ {
			bad = append(bad, fmt.Sprintf("a call arrived %v after probe %d, while ejected again for %v", at[i].Sub(probe).Round(time.Microsecond), probes, period))
		}
	}
}

// checkArrivals fails the test when a call reached a backend of bs while
// the ejection rule excluded it (ejectionTimeline), for calls made until
// stop; each backend must have logged its arrivals (RecordArrivals) from
// its first failure on.
func checkArrivals(t *testing.T, policy string, bs []*testbackend.Backend, stop time.Time, base, max time.Duration) {
	t.Helper()
	for _, b := range bs {
		probes, bad := ejectionTimeline(b.Arrivals(), stop, base, max)
		t.Logf("%s: %s: %d probes, %d calls against the ejection rule", policy, b.Addr, probes, len(bad))
		for i, why := range bad {
			if i == 3 {
				t.Errorf("%s: %s: and %d more calls against the ejection rule", policy, b.Addr, len(bad)-i)
				break
			}
			t.Errorf("%s: %s: %s", policy, b.Addr, why)
		}
	}
}

// failing makes every backend of bs fail every call from now, with its
// count reset and its arrivals logged. No call may be in flight.
func failing(bs []*testbackend.Backend) {
	for _, b := range bs {
		b.ResetCalls()
		b.RecordArrivals()
		b.SetFailing(true)
	}
}

// ZoneFailsWithinEjection checks the ejection rule against locality: six
// backends (z1, z2 of r1; z3 of r2), a client in r1/z1 calling from 8
// goroutines, then every z1 backend fails every call while registered.
// Each z1 backend receives at most the failures that eject it, the calls
// in flight then, and one probe per ejection end (failedBound), and no
// call while it is ejected: its log of arrivals shows the calls in flight
// at the ejection, then each probe within arrivalSlack after its
// ejection's end and nothing between (ejectionTimeline). A level with no
// admissible endpoint passes its calls on in the same pick, and a level
// whose endpoints await probes sends one each. short selects ejections of
// 1 s then 2 s (ShortEjections) over the defaults (30 s).
func ZoneFailsWithinEjection(t *testing.T, policy string, short bool) {
	f := startLocalFleet(t, 2)
	cfg, base, max := "{}", 30*time.Second, 300*time.Second
	if short {
		cfg, base, max = "{"+ShortEjections+"}", time.Second, 2*time.Second
	}
	conn := f.dial(t, policy, cfg, "z1")
	failing(f.zones["z1"])
	const d = 4 * time.Second
	stop := time.Now().Add(d)
	got := balancertest.CallsWhile(context.Background(), conn, failoverCallers, func() bool { return time.Now().Before(stop) })
	t.Logf("%s: %v of z1 failing: %d calls, %d failed, z2 %d, z3 %d", policy, d, got.OK+got.Failed, got.Failed, f.in(got, "z2"), f.in(got, "z3"))
	checkFailed(t, policy, f.zones["z1"], got, failedBound(d, base, max))
	checkArrivals(t, policy, f.zones["z1"], stop, base, max)
}

// ZoneFailsWithColors is ZoneFailsWithinEjection for a color group: blue
// backends in z1 and z2 besides the fleet, every blue backend failing. Blue
// calls spill from blue z1 to blue z2 as each is ejected, then go to the
// base, and never reach an ejected backend: each blue backend receives at
// most failedBound calls with short ejections, and none while ejected
// (ejectionTimeline).
func ZoneFailsWithColors(t *testing.T, policy string) {
	f := startLocalFleet(t, 2)
	blue := balancertest.Backends(t, 2)
	for i, z := range []string{"z1", "z2"} {
		f.reg.Register(t, registry.Instance{Name: "greeter", ID: "blue-" + z, Addr: blue[i].Addr, Region: "r1", Zone: z,
			Metadata: map[string]string{"color": "blue"}, RegisteredAt: time.Now().Add(-time.Hour)})
	}
	conn := f.dial(t, policy, "{"+ShortEjections+"}", "z1")
	ctx := color.WithColor(context.Background(), "blue")
	balancertest.CallUntilCtx(t, ctx, conn, 20*time.Second, "blue z1 serving blue calls", balancertest.ServedAll(blue[0]))
	failing(blue)
	const d = 4 * time.Second
	stop := time.Now().Add(d)
	got := balancertest.CallsWhile(ctx, conn, failoverCallers, func() bool { return time.Now().Before(stop) })
	t.Logf("%s: %v of blue failing: %d blue calls, %d failed, base served %d", policy, d, got.OK+got.Failed, got.Failed, got.OK)
	checkFailed(t, policy, blue, got, failedBound(d, time.Second, 2*time.Second))
	checkArrivals(t, policy, blue, stop, time.Second, 2*time.Second)
}

// ZoneFailsWhileRamping checks slow start against locality: with the z1
// backends ejected for failing, a healthy backend registered in z1 ramps
// (slow start, 10 s, linear from 10 %) and z1's share follows its ramped
// weight: in its first 2 s its factor is at most 0.2, z1's healthy
// fraction 0.2/3 and its share 1.4·0.2/3 = 9.3 %; the bound is 15 % (the
// connection's first moments count its full weight: it is connecting). The
// failing backends stay within failedBound and receive no call while
// ejected (ejectionTimeline), also when the new backend's arrival makes a
// new picker.
func ZoneFailsWhileRamping(t *testing.T, policy string) {
	f := startLocalFleet(t, 2)
	conn := f.dial(t, policy, "{"+slowStartConfig+"}", "z1")
	failing(f.zones["z1"])
	start := time.Now()
	warm := balancertest.CallsFor(conn, time.Second, failoverCallers)
	young := testbackend.Start(t)
	registered := time.Now()
	f.reg.Register(t, registry.Instance{Name: "greeter", ID: "z1-young", Addr: young.Addr, Region: "r1", Zone: "z1",
		RegisteredAt: registered})
	got := balancertest.CallsFor(conn, time.Until(registered.Add(2*time.Second)), failoverCallers)
	share := got.Share(young.Addr)
	t.Logf("%s: z1 failing, %d calls in the first second (%d failed); the new z1 backend took %.1f %% in its first 2 s (%v)",
		policy, warm.OK+warm.Failed, warm.Failed, 100*share, got)
	if share > 0.15 {
		t.Errorf("%s: the new z1 backend took %.1f %% of the calls in its first 2 s, want at most 15 %% (9.3 %% by its ramp)", policy, 100*share)
	}
	warm.Add(got)
	checkFailed(t, policy, f.zones["z1"], warm, failedBound(time.Since(start), 30*time.Second, 300*time.Second))
	checkArrivals(t, policy, f.zones["z1"], time.Now(), 30*time.Second, 300*time.Second)
}

// LevelSharesFollowEjection checks that the levels' shares change at the
// ejection that leaves a level with nothing admissible, not at some later
// refresh. z1 holds one backend; z2 a light one (weight 1) and two heavy
// ones (weight 10000 each) that are down (their connections are reset),
// so z2's healthy fraction is 1/20001; z3 two backends. The
// overprovisioning factor is 10, so that z1 takes every call again soon
// after its backend is back (at a healthy fraction of 0.1, 53 ms into the
// smoothed rise). Four times, while 8 goroutines call, the z1 backend
// fails every call until it is ejected (calls reach z3), then heals and
// is back after its probe (200 ms ejections). Each time z1 is out the
// shares give z2 10/20001 = 0.05 % of the calls and z3 the rest; shares
// left stale after the ejection would still draw z1, whose pass-on sends
// those calls to the next level in line: z2, that is its light backend.
// The light backend may take, besides its 0.05 % of all the calls (plus
// 5σ), one call per caller at each ejection: a pick that races the
// recomputation uses the view before it. A caller could race it twice only
// if the goroutine recomputing were descheduled for a whole call; 0 to 6
// calls in all were seen in 16 runs, with and without -race, against
// bounds of 36 to 52.
func LevelSharesFollowEjection(t *testing.T, policy string) {
	f := &localFleet{reg: StartRegistry(t), zones: map[string][]*testbackend.Backend{}}
	down := balancertest.Backends(t, 2)
	old := time.Now().Add(-time.Hour)
	for _, z := range []struct {
		region, zone string
		weights      []int
	}{{"r1", "z1", []int{100}}, {"r1", "z2", []int{1, registry.MaxWeight, registry.MaxWeight}}, {"r2", "z3", []int{100, 100}}} {
		for i, w := range z.weights {
			var addr string
			if w == registry.MaxWeight {
				addr = down[0].Addr
				down[0].Crash(t)
				down = down[1:]
			} else {
				b := testbackend.Start(t)
				f.zones[z.zone] = append(f.zones[z.zone], b)
				addr = b.Addr
			}
			f.reg.Register(t, registry.Instance{Name: "greeter", ID: fmt.Sprintf("%s-%d", z.zone, i), Addr: addr,
				Region: z.region, Zone: z.zone, Weight: w, RegisteredAt: old})
		}
	}
	// Every backend serving through a channel without locality first: the
	// resolver's shared watch holds every instance when conn starts, so
	// that conn's first list has them all, connected together.
	f.dial(t, "round_robin", "", "z1", "z2", "z3")
	conn := f.dial(t, policy, `{"outlier":{"baseEjectionTime":"200ms","maxEjectionTime":"200ms"},"locality":{"overprovisioningFactor":10}}`, "z1")
	a, light := f.zones["z1"][0], f.zones["z2"][0]
	z3 := func() int64 { return f.zones["z3"][0].Calls() + f.zones["z3"][1].Calls() }
	light.ResetCalls()

	var stop atomic.Bool
	done := make(chan balancertest.Result, 1)
	go func() {
		done <- balancertest.CallsWhile(context.Background(), conn, failoverCallers, func() bool { return !stop.Load() })
	}()
	var got balancertest.Result
	finish := func() {
		if !stop.Swap(true) {
			got = <-done
		}
	}
	defer finish()
	const cycles = 4
	for range cycles {
		before := z3()
		a.SetFailing(true)
		balancertest.WaitFor(t, 10*time.Second, "z1's backend ejected (z3 serving)", func() bool { return z3() >= before+20 })
		a.SetFailing(false)
		served := a.Calls()
		balancertest.WaitFor(t, 10*time.Second, "z1's backend back after its probe", func() bool { return a.Calls() >= served+100 })
	}
	finish()
	n := got.OK + got.Failed
	share := 10.0 / (1 + 2*registry.MaxWeight)
	mean := float64(n) * share
	bound := cycles*failoverCallers + int(mean+5*math.Sqrt(mean)) + 1
	t.Logf("%s: z1 out and back %d times: %d calls, z2's light backend %d (bound %d), z3 %d, %d failed", policy, cycles, n, light.Calls(), bound, f.in(got, "z3"), got.Failed)
	if c := int(light.Calls()); c > bound {
		t.Errorf("%s: z2's light backend took %d of %d calls, want at most %d (its share %.2f %%, and the picks racing each z1 ejection): "+
			"the calls of the ejected level went to the next level in line, not by the shares", policy, c, n, bound, 100*share)
	}
}
