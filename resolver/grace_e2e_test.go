package resolver_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

const (
	msgHeld     = "instances left the registry while serving; held for the deletion grace"
	msgReturned = "held instances are back in the registry"
	msgExpired  = "held instances did not come back within the deletion grace; removed"
)

// An instance deleted while serving stays in the channel's state, and
// gets calls, until its grace ends on the resolver's clock, with no
// registry event in between; one that comes back within the grace never
// leaves the state; one deleted while Draining leaves at once. The clock
// moves only when the test moves it, so none of this depends on timing.
func TestDeletionGraceOnTheClock(t *testing.T) {
	const grace = 3 * time.Second
	e := newEnv(t)
	sink := newLogSink()
	clk := resolver.NewFakeClock(time.Now())
	bld := resolver.NewBuilder(e.disc, resolver.WithLogger(sink.logger()), resolver.WithProtection(0, time.Second),
		resolver.WithDeletionGrace(grace), resolver.WithFakeClock(clk))
	a := e.serve(t, "a", "v1", "z1")
	b := testbackend.Start(t)
	key := registry.Key(registry.DefaultPrefix, "greeter", "b")
	write := func(draining bool) {
		t.Helper()
		val, err := registry.Marshal(registry.Instance{Name: "greeter", ID: "b", Addr: b.Addr, Draining: draining})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.cli.Put(ctxFor(t, 5*time.Second), key, string(val)); err != nil {
			t.Fatal(err)
		}
	}
	remove := func() {
		t.Helper()
		if _, err := e.cli.Delete(ctxFor(t, 5*time.Second), key); err != nil {
			t.Fatal(err)
		}
	}
	write(false)
	states := newStateLog()
	conn := dial(t, grpc.WithResolvers(states.builder(bld)), "muster:///greeter")
	callUntil(t, conn, "both called", hasAll(a.Addr, b.Addr))
	withB := func(s seenState) bool { return slices.Contains(s.addrs, b.Addr) }
	withoutB := func(s seenState) bool { return !withB(s) }
	from, _ := states.waitFor(t, "a and b", 0, time.Now().Add(10*time.Second), withB)

	// Deleted while serving: held, still called, until the clock passes
	// the grace.
	remove()
	sink.wait(t, msgHeld, 10*time.Second)
	b.ResetCalls()
	callUntil(t, conn, "b called while held", hasAll(b.Addr))
	for _, s := range states.since(from) {
		if withoutB(s) {
			t.Fatalf("b left the channel's state before its grace ended: %s", states.describe(from))
		}
	}
	clk.Advance(grace - time.Millisecond)
	if got := calls(t, conn, 20); !hasAll(b.Addr)(got) {
		t.Fatalf("calls just before the grace ended reached %v, want b among them", got)
	}
	clk.Advance(time.Millisecond)
	from, _ = states.waitFor(t, "b gone when its grace ended", from, time.Now().Add(10*time.Second), withoutB)
	sink.wait(t, msgExpired, 10*time.Second)

	// Back within the grace: never out of the state.
	write(false)
	from, _ = states.waitFor(t, "b back", from, time.Now().Add(10*time.Second), withB)
	remove()
	waitCount(t, sink, msgHeld, 2)
	write(false)
	sink.wait(t, msgReturned, 10*time.Second)
	clk.Advance(2 * grace)
	callUntil(t, conn, "b called after its return", hasAll(b.Addr))
	for _, s := range states.since(from) {
		if withoutB(s) {
			t.Fatalf("b, back within its grace, left the channel's state: %s", states.describe(from))
		}
	}

	// Drained, then deleted: out at once, with the clock standing still.
	write(true)
	remove()
	states.waitFor(t, "b gone at once after a drain", from, time.Now().Add(10*time.Second), withoutB)
	if n := sink.count(msgHeld); n != 2 {
		t.Fatalf("%d holds began, want 2 (the drained instance is not held)", n)
	}
	if st := bld.Stats(); st.Held != 2 {
		t.Fatalf("Stats().Held = %d, want 2", st.Held)
	}
}

// waitCount waits until sink holds n records with msg, for at most 10 s.
func waitCount(t *testing.T, sink *logSink, msg string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for sink.count(msg) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d records %q within 10 s, want %d; log: %s", sink.count(msg), msg, n, sink.messages())
		}
		time.Sleep(10 * time.Millisecond) // the sink has no per-count signal
	}
}
