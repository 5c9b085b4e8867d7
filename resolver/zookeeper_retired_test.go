package resolver_test

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
	"github.com/musterhq/muster/resolver"
)

// Over a ZooKeeper Discovery, an instance its registrar deregisters leaves
// the channel at once, with the resolver's clock standing still: the
// Registrar drains it before deleting its node and the Discovery records
// the deletion as deliberate. An instance whose registrar's session
// closes left serving: it is held for the deletion grace.
func TestZooKeeperDeregisterReleasedAtOnce(t *testing.T) {
	c := zktest.Start(t)
	opts := []zookeeper.Option{zookeeper.WithRoot("/muster"), zookeeper.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	d, err := zookeeper.NewDiscovery(c.Addrs(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	newRegistrar := func() *zookeeper.Registrar {
		r, err := zookeeper.NewRegistrar(c.Addrs(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	ctx := ctxFor(t, 30*time.Second)
	a, b, held := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	r, other := newRegistrar(), newRegistrar()
	for _, in := range []struct {
		r  *zookeeper.Registrar
		id string
		at string
	}{{r, "a", a.Addr}, {r, "b", b.Addr}, {other, "held", held.Addr}} {
		if err := in.r.Register(ctx, registry.Instance{Name: "greeter", ID: in.id, Addr: in.at}); err != nil {
			t.Fatal(err)
		}
	}

	sink := newLogSink()
	clk := resolver.NewFakeClock(time.Now())
	bld := resolver.NewBuilder(d, resolver.WithLogger(sink.logger()), resolver.WithProtection(0, time.Second),
		resolver.WithDeletionGrace(3*time.Second), resolver.WithFakeClock(clk))
	states := newStateLog()
	conn := dial(t, grpc.WithResolvers(states.builder(bld)), "muster:///greeter")
	callUntil(t, conn, "all called", hasAll(a.Addr, b.Addr, held.Addr))
	without := func(addr string) func(seenState) bool {
		return func(s seenState) bool { return !slices.Contains(s.addrs, addr) }
	}
	from, _ := states.waitFor(t, "all three", 0, time.Now().Add(10*time.Second), func(s seenState) bool {
		return len(s.addrs) == 3
	})

	if err := r.Deregister(ctx, "greeter", "b"); err != nil {
		t.Fatal(err)
	}
	from, _ = states.waitFor(t, "b gone at once after its Deregister", from, time.Now().Add(10*time.Second), without(b.Addr))
	if n := sink.count(msgHeld); n != 0 {
		t.Fatalf("%d holds began after a Deregister, want none", n)
	}

	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	sink.wait(t, msgHeld, 10*time.Second)
	for _, s := range states.since(from) {
		if without(held.Addr)(s) {
			t.Fatalf("held, whose session closed, left the channel's state before its grace ended: %s", states.describe(from))
		}
	}
	clk.Advance(3 * time.Second)
	states.waitFor(t, "held gone when its grace ended", from, time.Now().Add(10*time.Second), without(held.Addr))
}
