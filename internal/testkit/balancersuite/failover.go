package balancersuite

import (
	"context"
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

// ZoneFailsWithinEjection checks the ejection rule against locality: six
// backends (z1, z2 of r1; z3 of r2), a client in r1/z1 calling from 8
// goroutines, then every z1 backend fails every call while registered.
// Each z1 backend receives at most the failures that eject it, the calls
// in flight then, and one probe per ejection end (failedBound): a level
// with no admissible endpoint passes its calls on in the same pick, and a
// level whose endpoints await probes sends one each. short selects
// ejections of 1 s then 2 s (ShortEjections) over the defaults (30 s).
func ZoneFailsWithinEjection(t *testing.T, policy string, short bool) {
	f := startLocalFleet(t, 2)
	cfg, base, max := "{}", 30*time.Second, 300*time.Second
	if short {
		cfg, base, max = "{"+ShortEjections+"}", time.Second, 2*time.Second
	}
	conn := f.dial(t, policy, cfg, "z1")
	for _, b := range f.zones["z1"] {
		b.ResetCalls()
		b.SetFailing(true)
	}
	const d = 4 * time.Second
	got := balancertest.CallsFor(conn, d, failoverCallers)
	t.Logf("%s: %v of z1 failing: %d calls, %d failed, z2 %d, z3 %d", policy, d, got.OK+got.Failed, got.Failed, f.in(got, "z2"), f.in(got, "z3"))
	checkFailed(t, policy, f.zones["z1"], got, failedBound(d, base, max))
}

// ZoneFailsWithColors is ZoneFailsWithinEjection for a color group: blue
// backends in z1 and z2 besides the fleet, every blue backend failing. Blue
// calls spill from blue z1 to blue z2 as each is ejected, then go to the
// base, and never reach an ejected backend: each blue backend receives at
// most failedBound calls with short ejections.
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
	for _, b := range blue {
		b.ResetCalls()
		b.SetFailing(true)
	}
	const d = 4 * time.Second
	end := time.Now().Add(d)
	got := balancertest.CallsWhile(ctx, conn, failoverCallers, func() bool { return time.Now().Before(end) })
	t.Logf("%s: %v of blue failing: %d blue calls, %d failed, base served %d", policy, d, got.OK+got.Failed, got.Failed, got.OK)
	checkFailed(t, policy, blue, got, failedBound(d, time.Second, 2*time.Second))
}

// ZoneFailsWhileRamping checks slow start against locality: with the z1
// backends ejected for failing, a healthy backend registered in z1 ramps
// (slow start, 10 s, linear from 10 %) and z1's share follows its ramped
// weight: in its first 2 s its factor is at most 0.2, z1's healthy
// fraction 0.2/3 and its share 1.4·0.2/3 = 9.3 %; the bound is 15 % (the
// connection's first moments count its full weight: it is connecting). The
// failing backends stay within failedBound.
func ZoneFailsWhileRamping(t *testing.T, policy string) {
	f := startLocalFleet(t, 2)
	conn := f.dial(t, policy, "{"+slowStartConfig+"}", "z1")
	for _, b := range f.zones["z1"] {
		b.ResetCalls()
		b.SetFailing(true)
	}
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
}
