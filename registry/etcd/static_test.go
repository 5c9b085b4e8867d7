package etcd_test

import (
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// TestKeyWithoutLeaseIsAStaticInstance: a key written without a lease (by
// hand, or by another tool) is served like any instance, for as long as it
// exists: nothing expires it, and deleting it removes it.
func TestKeyWithoutLeaseIsAStaticInstance(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	d := newDiscovery(t, cli, disc("/p")...)
	r := newRegistrar(t, cli, reg("/p")...)
	ctx := ctxFor(t, 30*time.Second)
	if err := r.Register(ctx, instance("svc", "leased", 9000)); err != nil {
		t.Fatal(err)
	}
	static := instance("svc", "static", 9001)
	putInstance(t, cli, "/p", static) // no lease
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := registrytest.WaitFor(t, w, "the leased and the static instance", registrytest.HasIDs("leased", "static"))
	if in := s.Instances[1]; in.Addr != static.Addr {
		t.Fatalf("static instance served as %+v", *in)
	}
	if _, leases := rawKeys(t, cli, "/p/svc/"); leases[registry.Key("/p", "svc", "static")] != 0 {
		t.Fatalf("the static key has a lease: %v", leases)
	}

	// Added while watched, then deleted by hand.
	putInstance(t, cli, "/p", instance("svc", "static2", 9002))
	registrytest.WaitFor(t, w, "the second static instance", registrytest.HasIDs("leased", "static", "static2"))
	if err := etcd.Delete(ctx, cli, "svc", "static", etcd.WithPrefix("/p")); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "the deleted static instance gone", registrytest.HasIDs("leased", "static2"))
}
