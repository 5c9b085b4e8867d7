package legacy_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// TestDualWrite registers a Muster instance with mirrors in the three
// legacy layouts and follows it through each layout's Discovery: written
// under the registrar's lease, rewritten after the lease is revoked by
// hand, repaired by the audit when a copy is deleted, deleted by
// Deregister, gone with Close.
func TestDualWrite(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 60*time.Second)
	g, _, _ := mustLayouts(t, legacy.WithName("user", "user.rpc"))
	_, k, n := mustLayouts(t)
	r, err := etcd.NewRegistrar(cli, etcdopts.Registrar(etcd.WithMirror(g, k, n), etcd.WithAuditInterval(200*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	in := registry.Instance{Name: "user", ID: "u1", Addr: "127.0.0.1:9001", Version: "v2", Metadata: map[string]string{"color": "blue"}}
	if err := r.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	var ws []registry.Watcher
	for _, l := range []etcd.Layout{g, k, n} {
		ws = append(ws, watch(t, ctx, newDiscovery(t, cli, l), "user"))
	}
	waitAll := func(what string, ids ...string) {
		t.Helper()
		for _, w := range ws {
			registrytest.WaitFor(t, w, what, registrytest.HasIDs(ids...))
		}
	}
	waitAll("the mirrored instance in every layout", "u1")
	if got := ws[1].Snapshot().Instances[0]; got.Version != "v2" || got.Metadata["color"] != "blue" {
		t.Fatalf("Kratos copy %+v", *got)
	}
	lease := r.Status().Session
	for _, key := range []string{"user.rpc/u1", "/microservices/user/u1", "user/u1"} {
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != lease {
			t.Fatalf("copy %s: %v %v; want it bound to the lease %x", key, resp, err, lease)
		}
	}

	// Written again after rev: a revision past rev (the events coalesce, so
	// the moment without the copy may not be seen).
	againAfter := func(w registry.Watcher, what string, rev int64) {
		t.Helper()
		registrytest.WaitFor(t, w, what, func(s registry.Snapshot) bool {
			return s.Revision > rev && registrytest.HasIDs("u1")(s)
		})
	}
	revoked, err := cli.Revoke(ctx, clientv3.LeaseID(lease))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		againAfter(w, "the copy written again under a new lease", revoked.Header.Revision)
	}
	if st := r.Status(); st.Session == lease || st.Reregistrations == 0 {
		t.Fatalf("status %+v: want a new lease", st)
	}

	deleted, err := cli.Delete(ctx, "/microservices/user/u1")
	if err != nil {
		t.Fatal(err)
	}
	againAfter(ws[1], "the deleted Kratos copy repaired by the audit", deleted.Header.Revision)
	if r.Status().Repairs == 0 {
		t.Fatal("the copy came back without a repair counted")
	}

	if err := r.Deregister(ctx, "user", "u1"); err != nil {
		t.Fatal(err)
	}
	waitAll("every copy deleted by Deregister")
	if err := r.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	waitAll("registered again", "u1")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	waitAll("every copy gone with Close")
}

func TestWithMirrorNil(t *testing.T) {
	c := etcdtest.Start(t)
	if _, err := etcd.NewRegistrar(c.Client(t), etcd.WithMirror(nil)); err == nil {
		t.Fatal("WithMirror(nil): want an error")
	}
}

// TestDualWriteDeregisterAfterTakeover deregisters an instance whose Muster
// key another process took over (written under another lease): the key is
// left to its new owner, and the copy, still bound to the registrar's
// lease, is deleted all the same.
func TestDualWriteDeregisterAfterTakeover(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	g, _, _ := mustLayouts(t)
	r, err := etcd.NewRegistrar(cli, etcdopts.Registrar(etcd.WithMirror(g), etcd.WithAuditInterval(time.Hour))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.Register(ctx, registry.Instance{Name: "user", ID: "u1", Addr: "127.0.0.1:9001"}); err != nil {
		t.Fatal(err)
	}
	key := registry.Key(registry.DefaultPrefix, "user", "u1")
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v %v", key, resp, err)
	}
	other := grant(t, ctx, cli, 30)
	put(t, ctx, cli, key, string(resp.Kvs[0].Value), clientv3.WithLease(other))
	if err := r.Deregister(ctx, "user", "u1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := cli.Get(ctx, "user/u1"); len(got.Kvs) != 0 {
		t.Fatalf("the go-zero copy is still there: %v", got.Kvs)
	}
	if got, _ := cli.Get(ctx, key); len(got.Kvs) != 1 || clientv3.LeaseID(got.Kvs[0].Lease) != other {
		t.Fatalf("the key taken over was not left to its owner: %v", got.Kvs)
	}
}
