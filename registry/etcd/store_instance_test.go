package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// The etcd Store's Admin reads what only etcd has, for the command to find
// by a type assertion: an instance as registered, the overrides at a
// snapshot's revision, and the lease left on an instance.
func TestStoreAdminReadsWhatOnlyEtcdHas(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	st, err := etcd.NewStore(cli, fast("/p", etcd.WithLogger(quiet))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := ctxFor(t, 30*time.Second)
	if err := st.Registrar().Register(ctx, instance("svc", "a", 9000)); err != nil {
		t.Fatal(err)
	}
	admin := st.Admin(registry.Actor{Who: "ops", Source: registry.SourceCommand})
	type reader interface {
		Registered(ctx context.Context, service, id string) (registry.Instance, error)
		OverridesAt(ctx context.Context, service string, rev int64) (map[string]registry.Override, error)
		LeaseLeft(ctx context.Context, service, id string) (time.Duration, error)
	}
	a, ok := admin.(reader)
	if !ok {
		t.Fatalf("the etcd Store's Admin %T reads no instance, no overrides at a revision or no lease", admin)
	}

	zero := 0
	if err := admin.SetOverride(ctx, "svc", "a", registry.Override{Weight: &zero}); err != nil {
		t.Fatal(err)
	}
	in, err := a.Registered(ctx, "svc", "a")
	if err != nil || in.Addr != "127.0.0.1:9000" || in.EffectiveWeight() != registry.DefaultWeight {
		t.Fatalf("Registered(svc, a) = %+v, %v; want the value as registered, without the drain", in, err)
	}
	if _, err := a.Registered(ctx, "svc", "zz"); !errors.Is(err, registry.ErrNoInstance) {
		t.Fatalf("Registered(svc, zz) = %v; want registry.ErrNoInstance", err)
	}

	resp, err := cli.Get(ctx, "/p")
	if err != nil {
		t.Fatal(err)
	}
	drained := resp.Header.Revision
	if err := admin.ClearOverride(ctx, "svc", "a"); err != nil {
		t.Fatal(err)
	}
	if ov, err := a.OverridesAt(ctx, "svc", drained); err != nil || ov["a"].Weight == nil || *ov["a"].Weight != 0 {
		t.Fatalf("OverridesAt(revision %d, while drained) = %v, %v; want a at weight 0", drained, ov, err)
	}
	if ov, err := a.OverridesAt(ctx, "svc", 0); err != nil || len(ov) != 0 {
		t.Fatalf("OverridesAt(latest, after the undrain) = %v, %v; want none", ov, err)
	}

	left, err := a.LeaseLeft(ctx, "svc", "a")
	if err != nil || left <= 0 || left > 2*time.Second {
		t.Fatalf("LeaseLeft(svc, a) = %v, %v; want the registrar's live lease, at most its TTL of 2s", left, err)
	}
	if _, err := a.LeaseLeft(ctx, "svc", "zz"); !errors.Is(err, registry.ErrNoInstance) {
		t.Fatalf("LeaseLeft(svc, zz) = %v; want registry.ErrNoInstance", err)
	}
}
