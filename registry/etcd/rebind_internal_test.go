package etcd

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
)

// A lease the registrar believes lost may still be alive in etcd; the
// registrar then re-puts its keys under a new lease and revokes the old one.
// rebindOverrides must move an operator's override onto the new lease first,
// or the revocation would delete it while the instance never left.
func TestRebindOverrideKeepsItAcrossALeaseChange(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r, err := NewRegistrar(cli, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Register(ctx, registry.Instance{Name: "svc", ID: "a", Addr: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if err := SetOverride(ctx, cli, "svc", "a", registry.Override{Weight: &zero}); err != nil {
		t.Fatal(err)
	}
	old := clientv3.LeaseID(r.Status().Session)
	fresh, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	key := registry.Key(registry.DefaultPrefix, "svc", "a")
	if _, err := cli.Put(ctx, key, "x", clientv3.WithLease(fresh.ID)); err != nil { // as putPending would
		t.Fatal(err)
	}
	rebind(t, ctx, r, key, fresh.ID)
	if _, err := cli.Revoke(ctx, old); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, registry.OverrideKey(registry.DefaultPrefix, "svc", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != fresh.ID {
		t.Fatalf("override after the old lease was revoked: %v, want it bound to the new lease %x", resp.Kvs, fresh.ID)
	}
	if o, err := registry.UnmarshalOverride(resp.Kvs[0].Value); err != nil || o.Weight == nil || *o.Weight != 0 {
		t.Fatalf("override value changed: %s (%v)", resp.Kvs[0].Value, err)
	}
	// Already on the lease: nothing to do.
	rebind(t, ctx, r, key, fresh.ID)
}

// rebind reads the override of key in a transaction, as putBatch does, and
// hands the answer to rebindOverrides.
func rebind(t *testing.T, ctx context.Context, r *Registrar, key string, lease clientv3.LeaseID) {
	t.Helper()
	resp, err := r.loop.cli.Txn(ctx).Then(clientv3.OpGet(overrideKey(key))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.loop.rebindOverrides(lease, resp.Responses); err != nil {
		t.Fatal(err)
	}
}
