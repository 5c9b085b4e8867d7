package xds_test

import (
	"context"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// colored makes every call on a channel carry a color (color.WithColor),
// as a Go client of Muster marks a call.
type colored struct {
	grpc.ClientConnInterface
	color string
}

func (c colored) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConnInterface.Invoke(color.WithColor(ctx, c.color), method, args, reply, opts...)
}

func (c colored) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.ClientConnInterface.NewStream(color.WithColor(ctx, c.color), desc, method, opts...)
}

// keyed gives every call on a channel a key of its own (color.WithKey),
// as distinct users' calls carry.
type keyed struct {
	grpc.ClientConnInterface
	n atomic.Int64
}

func (k *keyed) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	ctx = color.WithKey(ctx, "user-"+strconv.FormatInt(k.n.Add(1), 10))
	return k.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// newCanaryEnv is newEnv for greeter with a control plane that follows
// the registry's canary settings (WithCanaries).
func newCanaryEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, xds.WithServices("greeter"))
	e.stopCP()
	canaries, err := etcd.NewCanaries(e.cli, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	e.startControlPlane(t, xds.WithServices("greeter"), xds.WithCanaries(canaries))
	return e
}

// registerColored registers addr as instance id of service with color c.
func (e *env) registerColored(t *testing.T, service, id, addr, c string) {
	t.Helper()
	in := registry.Instance{Name: service, ID: id, Addr: addr, Version: "v1",
		Metadata: map[string]string{color.DefaultInstanceKey: c}}
	if err := e.reg.Register(ctxFor(t, 10*time.Second), in); err != nil {
		t.Fatalf("register %s/%s: %v", service, id, err)
	}
}

// A grpc-go xDS client routes by color like Muster's balancers: blue calls
// reach the blue instance only, uncolored calls never do, a call of a color
// without instances goes to the base, and blue calls fall back to the base
// when the blue instance stops answering (the blue cluster's failover
// priorities) and when it is drained (the blue cluster is the base alone).
func TestColors(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter", "other"))
	a, b, blue := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	e.register(t, "other", "a", a.Addr, "", 0, false)
	r := e.xdsResolver(t, "color-client", "")
	conn := dialWith(t, r, "greeter")
	callUntil(t, dialWith(t, r, "other"), "calling other", hasAll(a.Addr))
	callUntil(t, conn, "calling a and b", hasAll(a.Addr, b.Addr))
	other := e.cp.Stats().Pushes["other"]

	e.registerColored(t, "greeter", "blue", blue.Addr, "blue")
	blueConn := colored{conn, "blue"}
	callUntil(t, blueConn, "a blue call reaching the blue instance", hasAll(blue.Addr))
	if got := calls(t, blueConn, 200); got[blue.Addr] != 200 {
		t.Errorf("blue calls: %v, want all 200 to the blue instance %s", got, blue.Addr)
	}
	const n = 2000
	if got := calls(t, conn, n); got[blue.Addr] != 0 || got[a.Addr]+got[b.Addr] != n {
		t.Errorf("uncolored calls: %v, want none of %d to the blue instance %s", got, n, blue.Addr)
	} else {
		t.Logf("uncolored calls: %v (0 of %d to blue)", got, n)
	}
	if got := calls(t, colored{conn, "green"}, 200); got[blue.Addr] != 0 {
		t.Errorf("green calls (no green instance): %v, want all to the base", got)
	}
	if got := e.cp.Stats().Pushes["other"]; got != other {
		t.Errorf("another service got pushes for greeter's colors: %+v, want %+v", got, other)
	}

	blue.Stop()
	callUntil(t, blueConn, "blue calls falling back to the base once the blue instance is down", hasAll(a.Addr, b.Addr))
	if got := calls(t, blueConn, 200); got[a.Addr]+got[b.Addr] != 200 {
		t.Errorf("blue calls with the blue instance down: %v, want all 200 to the base", got)
	}
	blue2 := testbackend.Start(t)
	e.registerColored(t, "greeter", "blue", blue2.Addr, "blue")
	callUntil(t, blueConn, "a blue call reaching the new blue instance", hasAll(blue2.Addr))
	in := registry.Instance{Name: "greeter", ID: "blue", Addr: blue2.Addr, Version: "v1", Draining: true,
		Metadata: map[string]string{color.DefaultInstanceKey: "blue"}}
	if err := e.reg.Register(ctxFor(t, 10*time.Second), in); err != nil {
		t.Fatal(err)
	}
	missUntil(t, blueConn, blue2.Addr, 100)
	if got := calls(t, blueConn, 200); got[a.Addr]+got[b.Addr] != 200 {
		t.Errorf("blue calls with the blue instance drained: %v, want all 200 to the base", got)
	}
	noNACK(t, e.cp)
}

// A canary of 20% sends a fifth of the uncolored calls to the blue
// instance. grpc-go picks a weighted cluster at random per call, so the
// blue count of n calls is Binomial(n, 0.2) whatever the machine's load:
// for n = 2,000, mean 400 and standard deviation 17.9; the bound, ±90, is
// five standard deviations (a false failure about once in 1.7 million
// runs). Blue calls still all go to blue, and calls of another color to
// the base. Clearing the canary sends no uncolored call to blue again.
func TestColorCanary(t *testing.T) {
	e := newCanaryEnv(t)
	a, blue := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.registerColored(t, "greeter", "blue", blue.Addr, "blue")
	conn := e.dial(t, "greeter", "canary-client", "")
	callUntil(t, colored{conn, "blue"}, "a blue call reaching blue", hasAll(blue.Addr))
	callUntil(t, conn, "an uncolored call reaching a", hasAll(a.Addr))

	// The canary changes greeter's route only: one route push, and the
	// client's ACK of it; nothing else of greeter nor of greeter~blue.
	prev := e.cp.Stats()
	if err := etcd.SetCanary(ctxFor(t, 10*time.Second), e.cli, "greeter",
		registry.Canary{Color: "blue", Percent: 20}, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	st := waitStats(t, e.cp, "the canary's route sent and acknowledged", func(st xds.Stats) bool {
		return st.Pushes["greeter"].Routes > prev.Pushes["greeter"].Routes && st.ACKs > prev.ACKs
	})
	want := prev.Pushes["greeter"]
	want.Routes++
	if got := st.Pushes["greeter"]; got != want {
		t.Errorf("a canary change: greeter pushes %+v, want %+v (its route only)", got, want)
	}
	if got, was := st.Pushes["greeter~blue"], prev.Pushes["greeter~blue"]; got != was {
		t.Errorf("a canary change: greeter~blue pushes %+v, want %+v (unchanged)", got, was)
	}
	callUntil(t, conn, "an uncolored call reaching blue under the canary", hasAll(blue.Addr))
	const n, p = 2000, 0.2
	mean, sd := n*p, math.Sqrt(n*p*(1-p))
	got := calls(t, conn, n)
	if d := math.Abs(float64(got[blue.Addr]) - mean); d > 5*sd {
		t.Errorf("canary 20%%: %d of %d uncolored calls to blue, want %.0f ± %.0f (5 sd)", got[blue.Addr], n, mean, 5*sd)
	} else {
		t.Logf("canary 20%%: %d of %d uncolored calls to blue (%.1f %%; want %.0f ± %.0f)", got[blue.Addr], n, 100*float64(got[blue.Addr])/n, mean, 5*sd)
	}
	if got := calls(t, colored{conn, "blue"}, 200); got[blue.Addr] != 200 {
		t.Errorf("blue calls under the canary: %v, want all to blue", got)
	}
	if got := calls(t, colored{conn, "green"}, 500); got[blue.Addr] != 0 {
		t.Errorf("green calls under the canary: %v, want all to the base", got)
	}

	if err := etcd.ClearCanary(ctxFor(t, 10*time.Second), e.cli, "greeter", etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	missUntil(t, conn, blue.Addr, 200)
	if got := calls(t, conn, 1000); got[blue.Addr] != 0 {
		t.Errorf("uncolored calls after the canary is cleared: %v, want none to blue", got)
	}
	noNACK(t, e.cp)
}
