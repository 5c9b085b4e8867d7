package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
)

const root = "/muster/services"

func inst(id string, port int) registry.Instance {
	return registry.Instance{Name: "svc", ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", port)}
}

func watch(t *testing.T, d *zookeeper.Discovery, service string) registry.Watcher {
	t.Helper()
	w, err := d.Watch(context.Background(), service)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func register(t *testing.T, r *zookeeper.Registrar, ins ...registry.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, in := range ins {
		if err := r.Register(ctx, in); err != nil {
			t.Fatalf("Register %s: %v", in.ID, err)
		}
	}
}

// A partition longer than the session timeout expires the registrar's
// session while its process lives: every instance is written again under
// a new session, exactly once.
func TestSessionExpiryRewritesEveryInstance(t *testing.T) {
	c := zktest.Start(t)
	srv := c.Servers()[0]
	r := newRegistrar(t, c.Addrs(), fast(root, zookeeper.WithAuditInterval(time.Hour))...) // through the proxy; no audit
	d := newDiscovery(t, c.DirectAddrs(), fast(root)...)
	raw := rawConn(t, c.DirectAddrs())
	w := watch(t, d, "svc")
	register(t, r, inst("a", 1), inst("b", 2), inst("c", 3))
	registrytest.WaitFor(t, w, "three instances", registrytest.HasIDs("a", "b", "c"))
	_, owners := rawNodes(t, raw, root, "svc")
	old := owners["a"]

	srv.Stall()
	registrytest.WaitForWithin(t, w, 60*time.Second, "the session to expire (nodes gone)", registrytest.HasIDs())
	srv.Heal()
	registrytest.WaitForWithin(t, w, 60*time.Second, "the instances back", registrytest.HasIDs("a", "b", "c"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatalf("not registered again: %+v", r.Status())
	}
	ids, owners := rawNodes(t, raw, root, "svc")
	if !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Fatalf("nodes after expiry %v, want exactly a b c", ids)
	}
	st := r.Status()
	for id, o := range owners {
		if o == old || o != st.Session {
			t.Fatalf("node %s owned by session %#x; old %#x, registrar's %#x", id, o, old, st.Session)
		}
	}
	if st.Reregistrations != 1 {
		t.Fatalf("Reregistrations = %d, want 1", st.Reregistrations)
	}
}

// A node deleted or overwritten by hand while the session lives is written
// again at once, by the watch on the node (the audit is set too long to do
// it within the wait).
func TestNodeDeletedByHandIsWrittenAgain(t *testing.T) {
	c := zktest.Start(t)
	r := newRegistrar(t, c.Addrs(), fast(root, zookeeper.WithAuditInterval(time.Hour))...)
	d := newDiscovery(t, c.Addrs(), fast(root)...)
	raw := rawConn(t, c.DirectAddrs())
	w := watch(t, d, "svc")
	register(t, r, inst("a", 1), inst("b", 2))
	registrytest.WaitFor(t, w, "a and b", registrytest.HasIDs("a", "b"))

	for round := 1; round <= 2; round++ {
		if err := raw.Delete(root+"/svc/a", -1); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, r, fmt.Sprintf("repair %d", round), func(st registry.RegistrarStatus) bool { return st.Repairs == uint64(round) })
		registrytest.WaitFor(t, w, "a written again", registrytest.HasIDs("a", "b"))
		if st := r.Status(); st.Reregistrations != 0 {
			t.Fatalf("the session changed: %+v", st)
		}
	}
	if _, err := raw.Set(root+"/svc/b", []byte(`{"v":1,"id":"b","name":"svc","addr":"10.0.0.1:1"}`), -1); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, r, "repair 3", func(st registry.RegistrarStatus) bool { return st.Repairs == 3 })
	registrytest.WaitFor(t, w, "b's own value back", func(s registry.Snapshot) bool {
		return len(s.Instances) == 2 && s.Instances[1].Addr == "127.0.0.1:2"
	})
}

// The audit alone (no watches on the nodes) writes again a node deleted by
// hand and replaced by another owner's node with another value.
func TestAuditRewritesAlteredNode(t *testing.T) {
	c := zktest.Start(t)
	r := newRegistrar(t, c.Addrs(), fast(root, zookeeper.WithAuditInterval(200*time.Millisecond), zookeeper.WithoutNodeWatches())...)
	d := newDiscovery(t, c.Addrs(), fast(root)...)
	raw := rawConn(t, c.DirectAddrs())
	w := watch(t, d, "svc")
	register(t, r, inst("a", 1))
	registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	// In one transaction, so that the audit cannot come between.
	if _, err := raw.Multi(
		&zk.DeleteRequest{Path: root + "/svc/a", Version: -1},
		&zk.CreateRequest{Path: root + "/svc/a", Data: []byte("junk"), Acl: zk.WorldACL(zk.PermAll)},
	); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, r, "a repair by the audit", func(st registry.RegistrarStatus) bool { return st.Repairs == 1 })
	registrytest.WaitFor(t, w, "a written again by the audit", registrytest.HasIDs("a"))
	if _, owners := rawNodes(t, raw, root, "svc"); owners["a"] != r.Status().Session {
		t.Fatalf("node a owned by %#x, want the registrar's session %#x", owners["a"], r.Status().Session)
	}
}

// A killed and restarted server: Discovery keeps its list (stale) while
// the server is down, and catches up once it is back, including an
// instance registered during the outage.
func TestServerKilledAndRestarted(t *testing.T) {
	c := zktest.Start(t)
	srv := c.Servers()[0]
	r := newRegistrar(t, c.Addrs(), fast(root, zookeeper.WithSessionTimeout(4*time.Second))...)
	d := newDiscovery(t, c.Addrs(), fast(root)...)
	w := watch(t, d, "svc")
	register(t, r, inst("a", 1))
	registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))

	srv.Kill()
	s := registrytest.WaitFor(t, w, "a stale snapshot", func(s registry.Snapshot) bool { return s.Stale() })
	if !registrytest.HasIDs("a")(s) {
		t.Fatalf("list not kept while the server is down: %s", registrytest.Describe(s))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := r.Register(ctx, inst("b", 2))
	cancel()
	if !errors.Is(err, registry.ErrPending) {
		t.Fatalf("Register while the server is down = %v, want ErrPending", err)
	}
	if s := w.Snapshot(); !registrytest.HasIDs("a")(s) {
		t.Fatalf("list not kept while the server is down: %s", registrytest.Describe(s))
	}
	srv.Restart(t)
	registrytest.WaitForWithin(t, w, 60*time.Second, "a and b, fresh", func(s registry.Snapshot) bool {
		return registrytest.HasIDs("a", "b")(s) && !s.Stale()
	})
}

// A frozen server (SIGSTOP) of an ensemble costs no live registration: the
// registrar's session moves to another server before it times out, so its
// node is never deleted, whichever server is frozen.
func TestFrozenServerLosesNoInstance(t *testing.T) {
	c := zktest.Start(t, zktest.WithServers(3))
	// The client gives up on a silent server after 2/3 of the session
	// timeout, which leaves it a third to reach another server and have
	// its session touched there. With 4 s (1.3 s to do so) three JVMs
	// beside two CPU-bound loops once missed it, and the session expired;
	// 6 s leaves 2 s, and a session stuck on the frozen server still
	// expires within the window.
	const timeout = 6 * time.Second
	r := newRegistrar(t, c.Addrs(), fast(root, zookeeper.WithSessionTimeout(timeout))...)
	d := newDiscovery(t, c.DirectAddrs(), fast(root)...)
	w := watch(t, d, "svc")
	register(t, r, inst("a", 1))
	registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	session := r.Status().Session
	raw := rawConn(t, c.DirectAddrs())

	// Every snapshot Discovery publishes must hold a.
	lost := watchLoss(w, "a")
	for _, srv := range c.Servers() {
		srv.Freeze(t)
		// The window: longer than the session timeout, so that a session
		// stuck on the frozen server would expire.
		time.Sleep(2 * timeout)
		srv.Thaw(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := r.WaitRegistered(ctx); err != nil {
			t.Fatalf("not registered after server %s thawed: %+v", srv.DirectAddr(), r.Status())
		}
		cancel()
		if _, owners := rawNodes(t, raw, root, "svc"); owners["a"] != session {
			t.Fatalf("after freezing %s: node a owned by %#x, want the first session %#x; status %+v", srv.DirectAddr(), owners["a"], session, r.Status())
		}
	}
	if v := lost(); v != "" {
		t.Fatalf("a Discovery snapshot lost the live instance: %s", v)
	}
	if st := r.Status(); st.Reregistrations != 0 || st.Session != session {
		t.Fatalf("status %+v, want the first session kept", st)
	}
}

// frozenServer listens like a frozen server: its kernel accepts
// connections, nothing ever answers. It returns the address.
func frozenServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range held {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// A client that has to reconnect while its other servers are frozen (their
// kernels accept connections, nothing answers) reaches the live one before
// its session expires: its handshakes with the frozen ones give up early.
func TestReconnectPastFrozenServers(t *testing.T) {
	c := zktest.Start(t)
	srv := c.Servers()[0]
	const timeout = 6 * time.Second
	servers := []string{frozenServer(t), frozenServer(t), srv.Addr()}
	r := newRegistrar(t, servers, fast(root, zookeeper.WithSessionTimeout(timeout), zookeeper.WithAuditInterval(time.Hour))...)
	d := newDiscovery(t, c.DirectAddrs(), fast(root)...)
	raw := rawConn(t, c.DirectAddrs())
	w := watch(t, d, "svc")
	register(t, r, inst("a", 1))
	registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	session := r.Status().Session

	lost := watchLoss(w, "a")
	// The live server's connection breaks: the client goes through both
	// frozen servers (round robin) before it is back.
	srv.Reset()
	time.Sleep(2 * timeout) // the window: a stuck session would expire in it
	if v := lost(); v != "" {
		t.Fatalf("the session expired: a Discovery snapshot lost the instance: %s", v)
	}
	if _, owners := rawNodes(t, raw, root, "svc"); owners["a"] != session {
		t.Fatalf("node a owned by %#x, want the first session %#x", owners["a"], session)
	}
}

// waitStatus waits until cond holds for r's status, polling: no event
// announces a change of its counters.
func waitStatus(t *testing.T, r *zookeeper.Registrar, what string, cond func(registry.RegistrarStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(r.Status()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; status %+v", what, r.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// watchLoss follows w until the returned function is called; it closes w
// and returns the first snapshot published without every one of ids
// (described), or "".
func watchLoss(w registry.Watcher, ids ...string) func() string {
	var lost atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range w.Updates() {
			if s := w.Snapshot(); !registrytest.HasIDs(ids...)(s) {
				lost.CompareAndSwap(nil, registrytest.Describe(s))
			}
		}
	}()
	return func() string {
		_ = w.Close()
		<-done
		v, _ := lost.Load().(string)
		return v
	}
}

// Each reconnection (the session kept) reads the service again; it must
// not ask for the watches again that the client library still holds (it
// keeps a channel per request until the watch fires: a flapping link would
// grow them without bound). The watches still work afterwards.
func TestReconnectionsDoNotStackWatches(t *testing.T) {
	c := zktest.Start(t)
	srv := c.Servers()[0]
	r := newRegistrar(t, c.DirectAddrs(), fast(root)...)
	d := newDiscovery(t, c.Addrs(), fast(root)...) // through the proxy
	w := watch(t, d, "svc")
	register(t, r, inst("a", 1), inst("b", 2), inst("c", 3))
	registrytest.WaitFor(t, w, "three instances", registrytest.HasIDs("a", "b", "c"))
	base := d.Stats().WatchRequests

	const resets = 5
	for i := 1; i <= resets; i++ {
		loads := d.Stats().Loads
		srv.Reset()
		registrytest.WaitForWithin(t, w, 60*time.Second, fmt.Sprintf("read again after reset %d", i), func(s registry.Snapshot) bool {
			return d.Stats().Loads > loads && !s.Stale() && registrytest.HasIDs("a", "b", "c")(s)
		})
	}
	// One session expiry in a slow run re-arms every watch once (5 nodes
	// here); asking again on every reconnection would add 5 per reset.
	if got := d.Stats().WatchRequests - base; got > 5 {
		t.Fatalf("%d reconnections set %d more watches; want at most 5 (one expiry's worth)", resets, got)
	}
	register(t, r, inst("a", 11), inst("d", 4))
	registrytest.WaitFor(t, w, "a moved and d added, seen by the watches kept", func(s registry.Snapshot) bool {
		return registrytest.HasIDs("a", "b", "c", "d")(s) && s.Instances[0].Addr == "127.0.0.1:11"
	})
}

// A service node deleted by hand (with its last instance gone) is a
// change, not history going back: the snapshot keeps its generation and
// its revision does not fall.
func TestServiceNodeDeletedByHandKeepsGeneration(t *testing.T) {
	c := zktest.Start(t)
	r := newRegistrar(t, c.Addrs(), fast(root)...)
	d := newDiscovery(t, c.Addrs(), fast(root)...)
	raw := rawConn(t, c.DirectAddrs())
	w := watch(t, d, "svc")
	register(t, r, inst("a", 1))
	registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Deregister(ctx, "svc", "a"); err != nil {
		t.Fatal(err)
	}
	before := registrytest.WaitFor(t, w, "a gone", registrytest.HasIDs())
	loads := d.Stats().Loads
	if err := raw.Delete(root+"/svc", -1); err != nil {
		t.Fatal(err)
	}
	after := registrytest.WaitFor(t, w, "the service read again", func(registry.Snapshot) bool { return d.Stats().Loads > loads })
	if after.Generation != before.Generation || after.Revision < before.Revision {
		t.Fatalf("after the service node was deleted: generation %d rev %d, before: generation %d rev %d",
			after.Generation, after.Revision, before.Generation, before.Revision)
	}
}
