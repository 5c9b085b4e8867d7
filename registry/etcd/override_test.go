package etcd_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func TestOverridesAreMergedKeptAndLeaveWithTheInstance(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p")...)
	d := newDiscovery(t, cli, disc("/p")...)
	ctx := ctxFor(t, 30*time.Second)
	for _, id := range []string{"a", "b"} {
		if err := r.Register(ctx, instance("svc", id, 9000)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "a, b", registrytest.HasIDs("a", "b"))
	has := func(id string, weight int) func(registry.Snapshot) bool {
		return func(s registry.Snapshot) bool {
			for _, in := range s.Instances {
				if in.ID == id {
					return in.EffectiveWeight() == weight
				}
			}
			return false
		}
	}

	zero, twoHundred := 0, 200
	if err := etcd.SetOverride(ctx, cli, "svc", "a", registry.Override{Weight: &zero}, etcd.WithPrefix("/p")); err != nil {
		t.Fatal(err)
	}
	s := registrytest.WaitFor(t, w, "a drained", has("a", 0))
	if !s.Instances[0].Draining || len(s.Instances) != 2 {
		t.Fatalf("drained snapshot %s", registrytest.Describe(s))
	}
	if err := etcd.SetOverride(ctx, cli, "svc", "b", registry.Override{Weight: &twoHundred}, etcd.WithPrefix("/p")); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "b at 200", has("b", 200))

	// A registrar's own Register does not undo the operator's override.
	if err := r.Register(ctx, registry.Instance{Name: "svc", ID: "a", Addr: "127.0.0.1:9000", Zone: "z2"}); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "a moved zone, still drained", func(s registry.Snapshot) bool {
		return has("a", 0)(s) && s.Instances[0].Zone == "z2"
	})

	if err := etcd.ClearOverride(ctx, cli, "svc", "b", etcd.WithPrefix("/p")); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "b back at 100", has("b", 100))

	// The lease ends (revoked here; expired after a long partition would be
	// the same): the instances and their overrides leave together, and the
	// registrar brings the instances back as registered.
	_, leases := rawKeys(t, cli, "/p/svc/a")
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(leases["/p/svc/a"])); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); r.Status().Reregistrations == 0 || !r.Status().Registered; {
		if time.Now().After(deadline) {
			t.Fatalf("no re-registration after the revocation: %+v", r.Status())
		}
		time.Sleep(20 * time.Millisecond) // polling the registrar's status
	}
	registrytest.WaitFor(t, w, "a and b back at 100 after the re-registration", func(s registry.Snapshot) bool {
		return has("a", 100)(s) && has("b", 100)(s)
	})
	if keys, _ := rawKeys(t, cli, "/p/svc/"); len(keys) != 2 {
		t.Fatalf("keys after the re-registration %v, want the two instances and no override", keys)
	}

	// The override leaves with its instance.
	if err := etcd.SetOverride(ctx, cli, "svc", "a", registry.Override{Weight: &zero}, etcd.WithPrefix("/p")); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "a drained again", has("a", 0))
	if err := r.Deregister(ctx, "svc", "a"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := rawKeys(t, cli, "/p/svc/a"); len(keys) != 0 {
		t.Fatalf("keys left after a was deregistered: %v", keys)
	}
	if err := etcd.SetOverride(ctx, cli, "svc", "a", registry.Override{Weight: &zero}, etcd.WithPrefix("/p")); !errors.Is(err, etcd.ErrNoInstance) {
		t.Fatalf("SetOverride of a deregistered instance = %v, want ErrNoInstance", err)
	}
	bad := -1
	if err := etcd.SetOverride(ctx, cli, "svc", "b", registry.Override{Weight: &bad}, etcd.WithPrefix("/p")); !errors.Is(err, registry.ErrInvalidInstance) {
		t.Fatalf("SetOverride with weight -1 = %v, want ErrInvalidInstance", err)
	}
}
