package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func TestFiftyInstancesShareOneLease(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p")...)
	ctx := ctxFor(t, 20*time.Second)
	for i := 0; i < 50; i++ {
		if err := r.Register(ctx, instance("svc", fmt.Sprintf("i%02d", i), 10000+i)); err != nil {
			t.Fatalf("Register %d: %v", i, err)
		}
	}
	keys, leases := rawKeys(t, cli, "/p/svc/")
	if len(keys) != 50 {
		t.Fatalf("%d keys in etcd, want 50", len(keys))
	}
	distinct := map[int64]bool{}
	for _, l := range leases {
		distinct[l] = true
	}
	if len(distinct) != 1 || distinct[0] {
		t.Fatalf("keys are bound to leases %v, want exactly one non-zero lease", distinct)
	}
	resp, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Leases) != 1 {
		t.Fatalf("etcd holds %d leases, want 1", len(resp.Leases))
	}
	if st := r.Status(); !st.Registered || st.Instances != 50 || st.Pending != 0 || st.Session != int64(resp.Leases[0].ID) {
		t.Fatalf("status %+v; want registered, 50 instances, lease %x", st, resp.Leases[0].ID)
	}
}

func TestLeaseRevokedFromOutsideIsReRegistered(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	// Backoff cap 500ms, TTL 2s: the keepalive notices a revoked lease
	// within TTL/3 and the first retry is immediate.
	r := newRegistrar(t, cli, reg("/p")...)
	ctx := ctxFor(t, 30*time.Second)
	for i := 0; i < 3; i++ {
		if err := r.Register(ctx, instance("svc", fmt.Sprintf("i%d", i), 9000+i)); err != nil {
			t.Fatal(err)
		}
	}
	before, leases := rawKeys(t, cli, "/p/svc/")
	old := leases[before[0]]

	audit := registrytest.StartAudit(cli, "/p")

	// The lease is revoked when it is older than its TTL, so that only
	// the renewals answered since the grant tell the registrar that it
	// was revoked, not expired (Status().Revocations).
	time.Sleep(3 * time.Second) // the lease's age is the experiment
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(old)); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	// Bound: keepalive period (TTL/3 ≈ 0.7s) + backoff cap (0.5s) + margin.
	deadline := revoked.Add(3 * time.Second)
	for {
		keys, leases := rawKeys(t, cli, "/p/svc/")
		back := len(keys) == 3
		for _, k := range keys {
			back = back && leases[k] != old && leases[k] != 0
		}
		if back {
			if fmt.Sprint(keys) != fmt.Sprint(before) {
				t.Fatalf("keys after re-registration %v, want the same keys %v", keys, before)
			}
			t.Logf("re-registered %v after revocation", time.Since(revoked).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys not re-registered within %v of the revocation: %v (status %+v)", deadline.Sub(revoked), keys, r.Status())
		}
		time.Sleep(20 * time.Millisecond) // polling etcd; nothing to await
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.Status(); st.Reregistrations != 1 || st.Revocations != 1 || st.Session == old {
		t.Fatalf("status %+v, want one revocation and one re-registration on a new lease", st)
	}
	audit.Stop(t)
}

func TestMemberRestartKeepsRegistrationAndDiscovery(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p")...)
	// A long request timeout: recovery must not wait for it.
	d := newDiscovery(t, cli, disc("/p", etcd.WithRequestTimeout(10*time.Second))...)
	ctx := ctxFor(t, 60*time.Second)
	w := registerAndWatch(t, ctx, r, d)

	m := c.Members()[0]
	m.Stop(t)
	registrytest.WaitFor(t, w, "stale while etcd is stopped", func(s registry.Snapshot) bool { return s.Stale() })
	if s := w.Snapshot(); fmt.Sprint(registrytest.IDs(s)) != "[a]" {
		t.Fatalf("stale snapshot lost instances: %s", registrytest.Describe(s))
	}
	m.Restart(t)
	restarted := time.Now()
	registrytest.WaitForWithin(t, w, 3*time.Second, "fresh within 3s of the restart", func(s registry.Snapshot) bool { return s.Loaded && !s.Stale() })
	t.Logf("fresh %v after the restart", time.Since(restarted).Round(time.Millisecond))
	if err := r.Register(ctx, instance("svc", "b", 9002)); err != nil {
		t.Fatalf("Register after restart: %v", err)
	}
	registrytest.WaitFor(t, w, "b after restart", registrytest.HasIDs("a", "b"))
	if err := r.Deregister(ctx, "svc", "a"); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "a gone after restart", registrytest.HasIDs("b"))
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRegistrarCreatedWhileEtcdIsDown(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	m.Stop(t)

	cli := c.Client(t)
	// Default timers: this is the path a server starting during an
	// outage takes.
	r := newRegistrar(t, cli, etcd.WithLogger(quiet))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := r.Register(ctx, instance("svc", "a", 9001))
	cancel()
	if !errors.Is(err, registry.ErrPending) {
		t.Fatalf("Register with etcd down = %v, want ErrPending", err)
	}
	if st := r.Status(); st.Registered || st.Pending != 1 {
		t.Fatalf("status while etcd is down %+v, want not registered, 1 pending", st)
	}

	m.Restart(t)
	started := time.Now()
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer wcancel()
	if err := r.WaitRegistered(wctx); err != nil {
		t.Fatalf("not registered within 2s of etcd starting: %v (status %+v)", err, r.Status())
	}
	t.Logf("registered %v after etcd started", time.Since(started).Round(time.Millisecond))
	keys, leases := rawKeys(t, cli, registry.ServicePrefix(registry.DefaultPrefix, "svc"))
	if len(keys) != 1 || leases[keys[0]] == 0 {
		t.Fatalf("keys %v leases %v, want one key with a lease", keys, leases)
	}
}

func TestDeregisterWhileEtcdIsDownCompletesLater(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p")...)
	ctx := ctxFor(t, 30*time.Second)
	for _, id := range []string{"a", "b"} {
		if err := r.Register(ctx, instance("svc", id, 9000)); err != nil {
			t.Fatal(err)
		}
	}
	m := c.Members()[0]
	m.Reset() // etcd down: the request never reaches it, so only a retry can delete
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := r.Deregister(short, "svc", "a")
	cancel()
	if !errors.Is(err, registry.ErrPending) {
		t.Fatalf("Deregister with etcd unreachable = %v, want ErrPending", err)
	}
	m.Heal()
	for deadline := time.Now().Add(10 * time.Second); ; {
		keys, _ := rawKeys(t, cli, "/p/svc/")
		if fmt.Sprint(keys) == "[/p/svc/b]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys %v 10s after etcd came back, want only b", keys)
		}
		time.Sleep(20 * time.Millisecond) // polling etcd; nothing to await
	}
}

func TestCloseRemovesEveryKeyInOneRevision(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r, err := etcd.NewRegistrar(cli, reg("/p")...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 20*time.Second)
	for i := 0; i < 5; i++ {
		if err := r.Register(ctx, instance(fmt.Sprintf("svc%d", i%2), fmt.Sprintf("i%d", i), 9000+i)); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, "/p/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	<-wch // created
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-wch:
		revs := map[int64]int{}
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypeDelete {
				t.Fatalf("unexpected %v event on %s", ev.Type, ev.Kv.Key)
			}
			revs[ev.Kv.ModRevision]++
		}
		if len(resp.Events) != 5 || len(revs) != 1 {
			t.Fatalf("Close produced %d deletes over revisions %v, want 5 in one revision", len(resp.Events), revs)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no delete event within 5s of Close")
	}
	if keys, _ := rawKeys(t, cli, "/p/"); len(keys) != 0 {
		t.Fatalf("keys left after Close: %v", keys)
	}
}

func TestPendingRegisterSaysWhy(t *testing.T) {
	c := etcdtest.Start(t)
	c.Members()[0].Stop(t)
	r := newRegistrar(t, c.Client(t), reg("/p", etcd.WithRequestTimeout(time.Second))...)
	err := r.Register(context.Background(), instance("svc", "a", 9000))
	if !errors.Is(err, registry.ErrPending) {
		t.Fatalf("Register with etcd down = %v, want ErrPending", err)
	}
	if !strings.Contains(err.Error(), "last etcd error: etcd: grant lease") {
		t.Fatalf("ErrPending does not say why: %v", err)
	}
	t.Log(err)
}
