package reliability_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// directRegistrar writes through the members themselves, bypassing the
// proxies, so that a fault injected in a proxy affects only the client side.
func (w *world) directRegistrar(t *testing.T, extra ...etcd.RegistrarOption) *etcd.Registrar {
	t.Helper()
	reg, err := etcd.NewRegistrar(w.c.Client(t, w.c.DirectEndpoints()...), regOpts(extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return reg
}

func inst(id string) registry.Instance {
	return registry.Instance{Name: "greeter", ID: id, Addr: "127.0.0.1:9"}
}

// Fault 1: the member a watch uses is partitioned away (stalled: its
// connections stay open and nothing flows). Each member is stalled in
// turn, so one round hits the watch's member; in every round a change must
// reach the watcher within the bound.
func TestWatchMovesOffAStalledMember(t *testing.T) {
	const bound = 10 * time.Second
	w := newWorld(t)
	reg := w.directRegistrar(t)
	wt := w.watch(t)
	ctx := context.Background()
	ids := []string{"base"}
	if err := reg.Register(ctx, inst("base")); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, wt, "base", registrytest.HasIDs(ids...))
	for i, m := range w.c.Members() {
		m.Stall()
		id := fmt.Sprintf("round-%d", i)
		ids = append(ids, id)
		start := time.Now()
		if err := reg.Register(ctx, inst(id)); err != nil {
			t.Fatal(err)
		}
		registrytest.WaitForWithin(t, wt, bound, id+" with "+m.Name()+" stalled", registrytest.HasIDs(ids...))
		t.Logf("%s stalled: change seen after %s", m.Name(), fmtDur(time.Since(start)))
		m.Heal()
	}
}

// Fault 2: the leader is killed. Registrations stay (no delete of any key
// for three TTLs), no key is duplicated or left without a lease, and
// discovery goes on.
func TestLeaderKilled(t *testing.T) {
	w := newWorld(t)
	for _, id := range []string{"a", "b", "c"} {
		w.startBackend(t, id)
	}
	wt := w.watch(t)
	registrytest.WaitFor(t, wt, "a, b, c", registrytest.HasIDs("a", "b", "c"))
	audit := registrytest.StartAudit(w.cli, registry.DefaultPrefix)
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := w.cli.Watch(wctx, registry.ServicePrefix(registry.DefaultPrefix, "greeter"), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	<-events

	leader := w.c.Members()[w.c.WaitLeader(t)]
	leader.Kill(t)
	killed := time.Now()
	next := w.c.WaitLeader(t)
	t.Logf("killed %s; new leader %s after %s", leader.Name(), w.c.Members()[next].Name(), fmtDur(time.Since(killed)))

	window := time.After(3 * ttl) // the property is about this window
	for done := false; !done; {
		select {
		case resp := <-events:
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					t.Fatalf("key %s deleted %s after the leader was killed", ev.Kv.Key, fmtDur(time.Since(killed)))
				}
			}
		case <-window:
			done = true
		}
	}
	d := w.startBackend(t, "d")
	registrytest.WaitFor(t, wt, "d registered after the kill", registrytest.HasIDs("a", "b", "c", "d"))
	if err := d.reg.Deregister(context.Background(), "greeter", "d"); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, wt, "d deregistered after the kill", registrytest.HasIDs("a", "b", "c"))
	leader.Restart(t)
	t.Logf("audit: %d reads without a problem", audit.Stop(t))
}

// Fault 3: the whole cluster is down for four TTLs under load. Every call
// succeeds from the cached list; a backend killed during the outage leaves
// within TTL + 1s of the recovery; the others are registered again.
func TestWholeClusterOutageLongerThanTTL(t *testing.T) {
	const (
		outage         = 4 * ttl
		reregisterWait = 5 * time.Second
		workers        = 4
	)
	w := newWorld(t)
	a, b, c := w.startBackend(t, "a"), w.startBackend(t, "b"), w.startBackend(t, "c")
	conn := w.dial(t)
	load := testbackend.StartLoad(conn, workers)
	for _, x := range []*backend{a, b, c} {
		load.WaitFor(t, x.be.Addr)
	}

	w.c.StopAll(t)
	down := time.Now()
	load.WaitForMore(t, a.be.Addr, 20)
	total, failed := load.Counts()
	if failed != 0 {
		t.Fatalf("%d of %d calls failed with etcd down, before any backend died", failed, total)
	}
	// c dies: its process is gone, its lease can only expire.
	c.be.Stop()
	closed := make(chan struct{})
	go func() { _ = c.reg.Close(); close(closed) }() // cannot revoke: etcd is down
	time.Sleep(time.Until(down.Add(outage)))         // the outage's length is the experiment
	w.c.RestartAll(t)
	up := time.Now()
	<-closed

	took := within(t, reregisterWait, "a and b registered again", func() bool {
		return a.reg.Status().Registered && b.reg.Status().Registered
	})
	keys := w.keys(t)
	if keys[key("a")] == 0 || keys[key("b")] == 0 {
		t.Fatalf("after recovery keys are %v, want a and b with leases", keys)
	}
	for _, x := range []*backend{a, b} {
		// Their leases expired unrenewed: not a revocation.
		if st := x.reg.Status(); st.Revocations != 0 {
			t.Fatalf("%s's status %+v: an expired lease counted as revoked", x.id, st)
		}
	}
	gone := within(t, ttl+time.Second, "c's key gone", func() bool {
		_, ok := w.keys(t)[key("c")]
		return !ok
	})
	total, failures := load.Finish()
	t.Logf("outage %s: %d calls, %d failed (c killed with up to %d in flight); a, b registered %s after recovery; c gone %s after recovery",
		fmtDur(up.Sub(down)), total, len(failures), workers, fmtDur(took), fmtDur(gone))
	if len(failures) > workers {
		t.Fatalf("%d calls failed, more than the %d in flight when c died: %v", len(failures), workers, failures[:min(5, len(failures))])
	}
}

// Fault 4: every lease is revoked at once while the servers live: clients
// never see an empty list, and the registry heals.
func TestMassExpiryKeepsClientsServed(t *testing.T) {
	w := newWorld(t)
	bs := []*backend{w.startBackend(t, "a"), w.startBackend(t, "b"), w.startBackend(t, "c")}
	conn := w.dial(t)
	load := testbackend.StartLoad(conn, 4)
	for _, x := range bs {
		load.WaitFor(t, x.be.Addr)
	}
	ctx := context.Background()
	leases, err := w.cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Leases {
		if _, err := w.cli.Revoke(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	took := within(t, 5*time.Second, "every backend registered again", func() bool {
		return len(w.keys(t)) == 3
	})
	for _, x := range bs {
		load.WaitForMore(t, x.be.Addr, 5)
	}
	total, failures := load.Finish()
	t.Logf("%d leases revoked: healed in %s; %d calls, %d failed; %d updates withheld by protection",
		len(leases.Leases), fmtDur(took), total, len(failures), w.b.Stats().Protected)
	if len(failures) != 0 {
		t.Fatalf("%d calls failed during the mass expiry: %v", len(failures), failures[0])
	}
}

// Fault 5: the discovery's connections are cut (reset, and new ones
// refused) while instances change and the store is compacted past its
// revision: once it is back, its cache equals etcd's state.
func TestCompactionWhileStreamCut(t *testing.T) {
	w := newWorld(t)
	reg := w.directRegistrar(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := reg.Register(ctx, inst(id)); err != nil {
			t.Fatal(err)
		}
	}
	wt := w.watch(t)
	registrytest.WaitFor(t, wt, "a, b", registrytest.HasIDs("a", "b"))
	for _, m := range w.c.Members() {
		m.Reset()
	}
	registrytest.WaitFor(t, wt, "stale while cut off", func(s registry.Snapshot) bool { return s.Stale() })
	if err := reg.Deregister(ctx, "greeter", "a"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c", "d"} {
		if err := reg.Register(ctx, inst(id)); err != nil {
			t.Fatal(err)
		}
	}
	w.c.Compact(t)
	for _, m := range w.c.Members() {
		m.Heal()
	}
	start := time.Now()
	registrytest.WaitFor(t, wt, "b, c, d and fresh", func(s registry.Snapshot) bool {
		return registrytest.HasIDs("b", "c", "d")(s) && !s.Stale()
	})
	t.Logf("reconciled %s after the cut ended; %d resyncs", fmtDur(time.Since(start)), w.disc.Stats().Resyncs)
}

// Fault 6: every member answers 500ms late, both ways. A registrar with
// the default TTL (10s) keeps its lease for longer than a TTL, and a
// discovery with default timers still sees changes.
func TestSlowEtcdKeepsTheLease(t *testing.T) {
	const observe = 12 * time.Second
	w := newWorld(t)
	cli := w.c.Client(t)
	reg, err := etcd.NewRegistrar(cli, etcd.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	disc, err := etcd.NewDiscovery(cli, etcd.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disc.Close() })
	ctx := context.Background()
	if err := reg.Register(ctx, inst("a")); err != nil {
		t.Fatal(err)
	}
	wt, err := disc.Watch(ctx, "greeter")
	if err != nil {
		t.Fatal(err)
	}
	defer wt.Close()
	registrytest.WaitFor(t, wt, "a", registrytest.HasIDs("a"))

	for _, m := range w.c.Members() {
		m.Delay(500 * time.Millisecond)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := w.c.Client(t, w.c.DirectEndpoints()...).Watch(wctx, key("a"), clientv3.WithCreatedNotify())
	<-events
	start := time.Now()
	if err := reg.Register(ctx, inst("b")); err != nil && !errorsIsPending(err) {
		t.Fatal(err)
	}
	registrytest.WaitForWithin(t, wt, 15*time.Second, "b through the delay", registrytest.HasIDs("a", "b"))
	seen := time.Since(start)
	window := time.After(observe - time.Since(start))
	for done := false; !done; {
		select {
		case resp := <-events:
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					t.Fatalf("a's key deleted %s into the delay", fmtDur(time.Since(start)))
				}
			}
		case <-window:
			done = true
		}
	}
	st := reg.Status()
	t.Logf("500ms delay each way: b seen after %s; after %s status %+v", fmtDur(seen), observe, st)
	if st.Reregistrations != 0 || !st.Registered {
		t.Fatalf("the lease did not hold through the delay: %+v", st)
	}
	for _, m := range w.c.Members() {
		m.Heal()
	}
}
