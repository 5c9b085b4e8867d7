package resolver_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

const (
	msgProtected = "empty-list protection: keeping the last good list"
	msgLifted    = "empty-list protection lifted"
)

// cutOffRegistrar returns a registrar on an etcd client of its own. Closing
// that client models servers that can no longer reach etcd: they cannot
// renew their lease nor re-register, and their keys expire after the TTL
// (2s, etcdopts.Registrar).
func (e *env) cutOffRegistrar(t *testing.T) (*etcd.Registrar, *clientv3.Client) {
	t.Helper()
	cli := e.c.Client(t)
	reg, err := etcd.NewRegistrar(cli, etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return reg, cli
}

// storeRevision returns etcd's current revision.
func (e *env) storeRevision(t *testing.T) int64 {
	t.Helper()
	resp, err := e.cli.Get(ctxFor(t, 5*time.Second), "muster-test-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// A service that really shrank (8 of 10 servers died and cannot
// re-register) with nothing happening in the registry afterwards: the
// channel keeps the 10 while protected, then gets exactly the 2 live
// instances a window after protection started, with no further registry
// event, and the lift is logged once.
func TestProtectionLiftsOnAQuietRegistry(t *testing.T) {
	const window = 3 * time.Second
	e := newEnv(t)
	sink := newLogSink()
	bld := resolver.NewBuilder(e.disc, resolver.WithLogger(sink.logger()), resolver.WithProtection(0.5, window))

	f := e.shrinkingFleet(t, bld)
	live, states, conn, full := f.live, f.states, f.conn, f.full
	f.die(t)
	prot := sink.wait(t, msgProtected, 10*time.Second)
	if prot.attrs["live"].Int64() != 2 || prot.attrs["served"].Int64() != 10 {
		t.Fatalf("protection started with %v; want live 2, served 10", prot.attrs)
	}
	revAtProtection := e.storeRevision(t)
	// While protected, calls go on (to the 2 live servers among the 10).
	if got := calls(t, conn, 20); len(got) != 2 {
		t.Fatalf("calls while protected reached %v, want the 2 live servers", got)
	}

	i, lifted := states.waitFor(t, "exactly the 2 live instances", full+1, prot.at.Add(window+time.Second),
		func(s seenState) bool { return len(s.addrs) < 10 })
	if !sameAddrs(lifted, live) {
		t.Fatalf("after protection the channel got %v, want exactly the live %v", lifted.addrs, live)
	}
	if i != full+1 {
		t.Fatalf("states between the full list and the lift (the 10 not kept): %s", states.describe(full))
	}
	took := lifted.at.Sub(prot.at)
	if took < window-100*time.Millisecond {
		t.Fatalf("protection lifted %v after it started, before the window of %v", took, window)
	}
	if rev := e.storeRevision(t); rev != revAtProtection {
		t.Fatalf("etcd's revision moved from %d to %d during protection: the lift followed a registry event", revAtProtection, rev)
	}
	t.Logf("protection lifted %v after it started (window %v), no registry event in between (revision %d)",
		took.Round(time.Millisecond), window, revAtProtection)

	if n := sink.count(msgLifted); n != 1 {
		t.Fatalf("the lift was logged %d times, want once", n)
	}
	lift := sink.wait(t, msgLifted, 0)
	if lift.attrs["service"].String() != "greeter" || lift.attrs["live"].Int64() != 2 || lift.attrs["served"].Int64() != 10 ||
		lift.attrs["withheld_for"].Duration() < window {
		t.Fatalf("lift logged with %v; want service greeter, live 2, served 10, withheld_for >= %v", lift.attrs, window)
	}
	got := calls(t, conn, 20)
	if len(got) != 2 || !hasAll(live...)(got) {
		t.Fatalf("calls after the lift reached %v, want the 2 live servers", got)
	}
}

// The lift of protection is the resolver's own timer's doing: with a
// window of an hour on a clock that moves only when the test moves it, a
// channel protected after 8 of its 10 servers died keeps the 10 however
// long it waits in real time, and gets the 2 live instances as soon as the
// clock passes the window, with no registry event in between. (The
// protector's unit tests drive its next() and cannot see a timer that
// never fires.)
func TestProtectionLiftTimerFiresOnTheClock(t *testing.T) {
	const window = time.Hour
	e := newEnv(t)
	sink := newLogSink()
	clk := resolver.NewFakeClock(time.Now())
	bld := resolver.NewBuilder(e.disc, resolver.WithLogger(sink.logger()), resolver.WithProtection(0.5, window),
		resolver.WithFakeClock(clk))
	f := e.shrinkingFleet(t, bld)
	live, states, conn, full := f.live, f.states, f.conn, f.full
	f.die(t)
	sink.wait(t, msgProtected, 10*time.Second)
	revAtProtection := e.storeRevision(t)
	clk.Advance(window / 2)
	if got := calls(t, conn, 20); len(got) != 2 {
		t.Fatalf("calls while protected reached %v, want the 2 live servers", got)
	}
	for _, st := range states.since(full + 1) {
		if len(st.addrs) < 10 {
			t.Fatalf("half a window into protection the channel got %s, want the 10 kept", states.describe(full))
		}
	}
	clk.Advance(window/2 + time.Second)
	_, lifted := states.waitFor(t, "exactly the 2 live instances", full+1, time.Now().Add(10*time.Second),
		func(s seenState) bool { return len(s.addrs) < 10 })
	if !sameAddrs(lifted, live) {
		t.Fatalf("after protection the channel got %v, want exactly the live %v", lifted.addrs, live)
	}
	if rev := e.storeRevision(t); rev != revAtProtection {
		t.Fatalf("etcd's revision moved from %d to %d during protection: the lift followed a registry event", revAtProtection, rev)
	}
}

// shrinkingFleet is 2 live servers and 8 that will die, on a channel with
// bld, every server called and the 10 seen in a state (index full).
type shrinkingFleet struct {
	live    []string
	dead    []*testbackend.Backend
	deadCli *clientv3.Client
	states  *stateLog
	conn    *grpc.ClientConn
	full    int
}

func (e *env) shrinkingFleet(t *testing.T, bld *resolver.Builder) shrinkingFleet {
	t.Helper()
	var f shrinkingFleet
	for i := range 2 {
		f.live = append(f.live, e.serve(t, fmt.Sprintf("live-%d", i), "v1", "z1").Addr)
	}
	all := append([]string(nil), f.live...)
	// The eight that die share a registrar, so their keys go in one lease
	// revocation: one update from 10 to 2.
	deadReg, deadCli := e.cutOffRegistrar(t)
	f.deadCli = deadCli
	for i := range 8 {
		be := testbackend.Start(t)
		in := registry.Instance{Name: "greeter", ID: fmt.Sprintf("dead-%d", i), Addr: be.Addr}
		if err := deadReg.Register(ctxFor(t, 10*time.Second), in); err != nil {
			t.Fatal(err)
		}
		f.dead = append(f.dead, be)
		all = append(all, be.Addr)
	}
	f.states = newStateLog()
	f.conn = dial(t, grpc.WithResolvers(f.states.builder(bld)), "muster:///greeter")
	callUntil(t, f.conn, "every server called", hasAll(all...))
	f.full, _ = f.states.waitFor(t, "all 10 instances", 0, time.Now().Add(10*time.Second), func(s seenState) bool { return sameAddrs(s, all) })
	return f
}

// die stops the eight servers: their processes stop and they reach etcd no
// more. Their lease expires within the TTL.
func (f shrinkingFleet) die(t *testing.T) {
	for _, be := range f.dead {
		be.Stop()
	}
	if err := f.deadCli.Close(); err != nil {
		t.Logf("closing the dead servers' etcd client: %v", err)
	}
}
