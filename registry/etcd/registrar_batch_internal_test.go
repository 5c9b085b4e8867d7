package etcd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
)

func TestBatchesKeepToTheLimits(t *testing.T) {
	cost := func(c txnCost) txnCost { return c }
	one := txnCost{ops: 1, bytes: 10}
	two := txnCost{ops: 2, bytes: 10}
	deep := txnCost{ops: 1, depth: 3, bytes: 10}
	huge := txnCost{ops: 1, bytes: 100}
	for _, tc := range []struct {
		name         string
		items        []txnCost
		limit, bytes int
		want         []int // sizes of the batches
	}{
		{"none", nil, 4, 1000, nil},
		{"by operations", []txnCost{one, one, one, one, one}, 4, 1000, []int{4, 1}},
		{"an item's operations stay together", []txnCost{two, two, one, two}, 4, 1000, []int{2, 2}},
		{"nesting counts once per batch", []txnCost{deep, one, one, deep, one}, 6, 1000, []int{3, 2}},
		{"by bytes", []txnCost{one, one, one, one, one}, 100, 25, []int{2, 2, 1}},
		{"an item too large goes alone", []txnCost{one, huge, one}, 100, 50, []int{1, 1, 1}},
		{"an item of too many operations goes alone", []txnCost{one, {ops: 9}, one}, 4, 1000, []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for _, b := range batches(tc.items, cost, tc.limit, tc.bytes) {
				got = append(got, len(b))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("batch sizes %v, want %v", got, tc.want)
			}
		})
	}
}

// A lease the registrar believes lost while etcd keeps it: every key is
// written again under a new lease, in transactions that also read the
// overrides, and the overrides are moved onto the new lease before the old
// one is revoked.
func TestReRegistrationInBatchesKeepsOverrides(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r, err := NewRegistrar(cli, WithTTL(30*time.Second), WithMaxTxnOps(16),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 100
	for i := 0; i < n; i++ {
		done, stop := context.WithCancel(ctx)
		stop() // queued, not waited for
		_ = r.Register(done, registry.Instance{Name: "svc", ID: fmt.Sprintf("i%03d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 10000+i)})
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	zero := 0
	overridden := []string{"i003", "i050", "i099"}
	for _, id := range overridden {
		if err := SetOverride(ctx, cli, "svc", id, registry.Override{Weight: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	old := clientv3.LeaseID(r.Status().Session) // the published status orders the read of r.loop.ls below after the loop's write
	// The keepalive ends while etcd keeps the lease.
	r.loop.ls.stop()
	for st := r.Status(); st.Session == int64(old) || !st.Registered; st = r.Status() {
		if ctx.Err() != nil {
			t.Fatalf("not re-registered under a new lease; status %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	lease := r.Status().Session
	for {
		ttl, err := cli.TimeToLive(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL == -1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the lost lease %x still lives (TTL %d)", int64(old), ttl.TTL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := cli.Get(ctx, registry.DefaultPrefix+"/svc/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != n+len(overridden) {
		t.Fatalf("%d keys after re-registration, want %d instances and %d overrides", len(resp.Kvs), n, len(overridden))
	}
	for _, kv := range resp.Kvs {
		if kv.Lease != lease {
			t.Fatalf("%s is bound to lease %x, want the new lease %x", kv.Key, kv.Lease, lease)
		}
	}
}
