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

// A lease the registrar believes lost (its keepalive ended on the client
// side) may still be alive in etcd, holding keys the registrar no longer
// wants, such as an instance deregistered meanwhile. Once every wanted key
// is re-put under the new lease, the old one is revoked, so those keys go
// at once instead of when the old lease expires (30 s here).
func TestLostLeaseIsRevokedAfterReRegistration(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r, err := NewRegistrar(cli, WithTTL(30*time.Second), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Register(ctx, registry.Instance{Name: "svc", ID: "a", Addr: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	old := clientv3.LeaseID(r.Status().Session) // the published status orders the read of r.loop.ls below after the loop's write
	stale := registry.Key(registry.DefaultPrefix, "svc", "gone")
	if _, err := cli.Put(ctx, stale, `{"v":1,"id":"gone","name":"svc","addr":"127.0.0.1:2"}`, clientv3.WithLease(old)); err != nil {
		t.Fatal(err)
	}
	// The keepalive ends while etcd keeps the lease.
	r.loop.ls.stop()
	for st := r.Status(); st.Session == int64(old) || !st.Registered; st = r.Status() {
		if ctx.Err() != nil {
			t.Fatalf("not re-registered under a new lease; status %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	reregistered := time.Now()
	for {
		ttl, err := cli.TimeToLive(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Get(ctx, stale)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL == -1 && len(resp.Kvs) == 0 {
			break
		}
		if time.Since(reregistered) > time.Second {
			t.Fatalf("1s after re-registration the lost lease %x has %ds left and its key %s is still there (%d)", int64(old), ttl.TTL, stale, len(resp.Kvs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := cli.Get(ctx, registry.Key(registry.DefaultPrefix, "svc", "a"))
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != clientv3.LeaseID(r.Status().Session) {
		t.Fatalf("a after re-registration: %v %v, want it on the new lease", resp, err)
	}
}
