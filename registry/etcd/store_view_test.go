package etcd_test

import (
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// An Admin's Overrides reads every override of a service and nothing
// else; LeaseExpiry tells when the registrar's lease runs out for each of
// its instances, and leaves out an instance held by no lease.
func TestStoreOverridesAndLeases(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	r := newRegistrar(t, cli, reg("/p", etcd.WithTTL(10*time.Second))...)
	for i, id := range []string{"a", "b", "c"} {
		if err := r.Register(ctx, instance("svc", id, 9000+i)); err != nil {
			t.Fatal(err)
		}
	}
	// An instance without a lease, written by hand.
	val, err := registry.Marshal(instance("svc", "d", 9003))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, registry.Key("/p", "svc", "d"), string(val)); err != nil {
		t.Fatal(err)
	}
	s, err := etcd.NewStore(cli, fast("/p")...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	zero, twoHundred := 0, 200
	want := map[string]int{"a": 0, "c": 200}
	admin := s.Admin(registry.Actor{Who: "alice", Source: registry.SourceConsole})
	if err := admin.SetOverride(ctx, "svc", "a", registry.Override{Weight: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := admin.SetOverride(ctx, "svc", "c", registry.Override{Weight: &twoHundred}); err != nil {
		t.Fatal(err)
	}
	got, err := admin.Overrides(ctx, "svc")
	if err != nil {
		t.Fatalf("Overrides: %v", err)
	}
	if len(got) != len(want) {
		t.Errorf("Overrides = %v, want weights %v", got, want)
	}
	for id, w := range want {
		if o, ok := got[id]; !ok || o.Weight == nil || *o.Weight != w {
			t.Errorf("override of %s = %+v (%v), want weight %d", id, o, ok, w)
		}
	}

	before := time.Now()
	exp, err := s.LeaseExpiry(ctx, "svc", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(exp) != 3 {
		t.Fatalf("LeaseExpiry = %v, want a, b and c (d has no lease)", exp)
	}
	for id, at := range exp {
		if d := at.Sub(before); d <= 0 || d > 11*time.Second {
			t.Errorf("lease of %s runs out in %v, want within the 10s TTL", id, d)
		}
	}
	if _, err := s.LeaseExpiry(ctx, "no such/name", 0); err == nil {
		t.Error("LeaseExpiry of an invalid name: no error")
	}
}
