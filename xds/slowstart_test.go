package xds_test

import (
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/xds"
)

// Through xDS, muster_wrr ramps an instance by its registration time, which
// the Cluster's balancer config carries (gRPC's xDS endpoints cannot): two
// instances registered an hour ago take their full share, one registered 5
// minutes into a 10-minute linear window half of it, 100:100:50, so 40/40/20
// % of the calls. Without the registration times the balancer would not
// know the third is young (33 % each).
func TestSlowStartOverXDS(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.MusterWRR), xds.WithSlowStart(10*time.Minute, 1, 10))
	a, b, c := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	now := time.Now()
	for _, in := range []registry.Instance{
		{Name: "greeter", ID: "a", Addr: a.Addr, RegisteredAt: now.Add(-time.Hour)},
		{Name: "greeter", ID: "b", Addr: b.Addr, RegisteredAt: now.Add(-time.Hour)},
		{Name: "greeter", ID: "c", Addr: c.Addr, RegisteredAt: now.Add(-5 * time.Minute)},
	} {
		if err := e.reg.Register(ctxFor(t, 10*time.Second), in); err != nil {
			t.Fatalf("register %s: %v", in.ID, err)
		}
	}
	conn := e.dial(t, "greeter", "wrr-client", "")
	// c's share grows by 1/600 of its weight a second: within the
	// tolerance for the half minute the calls take.
	want := []share{{a.Addr, 0.40}, {b.Addr, 0.40}, {c.Addr, 0.20}}
	sharesUntil(t, conn, "calls in shares 40/40/20", want, 400)
	checkShares(t, calls(t, conn, 2000), want, wrrTolerance)
	noNACK(t, e.cp)
}

// A slow start for a policy without one is an error of New naming the
// option and the policy; so are values out of the balancers' bounds.
func TestSlowStartOptionErrors(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	for _, tc := range []struct {
		opts []xds.Option
		want string
	}{
		{[]xds.Option{xds.WithSlowStart(time.Minute, 1, 10)}, "xds: WithSlowStart: the default policy round_robin has no slow start (want muster_p2c or muster_wrr)"},
		{[]xds.Option{xds.WithLBPolicy(xds.MusterP2C), xds.WithLBPolicy(xds.RingHash, "greeter"), xds.WithSlowStart(time.Minute, 1, 10, "greeter")},
			"xds: WithSlowStart: service greeter: policy ring_hash has no slow start (want muster_p2c or muster_wrr)"},
		{[]xds.Option{xds.WithLBPolicy(xds.MusterP2C), xds.WithSlowStart(0, 1, 10)}, "xds: WithSlowStart: window 0s is out of range (0, 1h0m0s]"},
		{[]xds.Option{xds.WithLBPolicy(xds.MusterP2C), xds.WithSlowStart(time.Minute, 0, 10)}, "xds: WithSlowStart: aggression 0 is out of range 0.1..10"},
		{[]xds.Option{xds.WithLBPolicy(xds.MusterP2C), xds.WithSlowStart(time.Minute, 1, 101)}, "xds: WithSlowStart: minWeightPercent 101 is out of range 0..100"},
	} {
		cp, err := xds.New(e.disc, append([]xds.Option{xds.WithServices("greeter")}, tc.opts...)...)
		if err == nil {
			_ = cp.Close()
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
}
