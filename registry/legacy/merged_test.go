package legacy_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// legacySources returns the three legacy Discoveries on cli, with the
// service "user" known to go-zero as "user.rpc".
func legacySources(t *testing.T, cli *clientv3.Client) []legacy.Source {
	t.Helper()
	g, _, _ := mustLayouts(t, legacy.WithName("user", "user.rpc"))
	_, k, n := mustLayouts(t)
	return []legacy.Source{
		{Name: "go-zero", Discovery: newDiscovery(t, cli, g)},
		{Name: "kratos", Discovery: newDiscovery(t, cli, k)},
		{Name: "etcd-naming", Discovery: newDiscovery(t, cli, n)},
	}
}

// newPrimary returns a Discovery of Muster's own layout on cli.
func newPrimary(t *testing.T, cli *clientv3.Client) *etcd.Discovery {
	t.Helper()
	primary, err := etcd.NewDiscovery(cli, etcdopts.Discovery()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	return primary
}

func newMerged(t *testing.T, cli *clientv3.Client) *legacy.Merged {
	t.Helper()
	m, err := legacy.NewMerged(newPrimary(t, cli), legacySources(t, cli)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestMergedUnionMusterWins(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	m := newMerged(t, cli)

	r, err := etcd.NewRegistrar(cli, etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.Register(ctx, registry.Instance{Name: "user", ID: "m1", Addr: "127.0.0.1:9001", Version: "muster"}); err != nil {
		t.Fatal(err)
	}
	lease := grant(t, ctx, cli, 10)
	put(t, ctx, cli, "user.rpc/1", "127.0.0.1:9001", clientv3.WithLease(lease)) // the same server, still in go-zero's layout
	put(t, ctx, cli, "user.rpc/2", "127.0.0.1:9002", clientv3.WithLease(lease))
	put(t, ctx, cli, "/microservices/user/k1",
		`{"id":"k1","name":"user","version":"v1","metadata":{},"endpoints":["grpc://127.0.0.1:9003?isSecure=false"]}`, clientv3.WithLease(lease))
	em, err := endpoints.NewManager(cli, "user")
	if err != nil {
		t.Fatal(err)
	}
	if err := em.AddEndpoint(ctx, "user/n1", endpoints.Endpoint{Addr: "127.0.0.1:9004"}, clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}

	w := watch(t, ctx, m, "user")
	s := registrytest.WaitFor(t, w, "the union of the four layouts", registrytest.HasIDs("2", "k1", "m1", "n1"))
	wantSource := map[string]string{"2": "go-zero", "k1": "kratos", "m1": legacy.PrimarySource, "n1": "etcd-naming"}
	for _, in := range s.Instances {
		if in.Addr == "127.0.0.1:9001" && in.Version != "muster" {
			t.Fatalf("the shared address is served with %+v, want Muster's instance", *in)
		}
		if got := legacy.SourceOf(in); got != wantSource[in.ID] {
			t.Errorf("instance %s: source %q, want %q", in.ID, got, wantSource[in.ID])
		}
	}
	if _, err := cli.Delete(ctx, "user.rpc/2"); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "go-zero's deleted key gone", registrytest.HasIDs("k1", "m1", "n1"))
	if err := r.Deregister(ctx, "user", "m1"); err != nil {
		t.Fatal(err)
	}
	s = registrytest.WaitFor(t, w, "go-zero's entry for the address once Muster's is gone", registrytest.HasIDs("1", "k1", "n1"))
	if got := legacy.SourceOf(s.Instances[0]); got != "go-zero" {
		t.Fatalf("the address left by Muster: source %q, want go-zero", got)
	}
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "every legacy instance gone with its lease", registrytest.HasIDs())
}

func TestMergedSourcesByService(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	primary := newPrimary(t, cli)
	g, _, _ := mustLayouts(t)
	m, err := legacy.NewMerged(primary, legacy.Source{Name: "go-zero", Discovery: newDiscovery(t, cli, g), Services: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	put(t, ctx, cli, "a/1", "127.0.0.1:9001")
	put(t, ctx, cli, "b/1", "127.0.0.1:9002")
	if names, err := m.Services(ctx); err != nil || len(names) != 1 || names[0] != "a" {
		t.Fatalf("Services: %v, %v; want [a], the service go-zero is asked for", names, err)
	}
	wa, wb := watch(t, ctx, m, "a"), watch(t, ctx, m, "b")
	registrytest.WaitFor(t, wa, "a from go-zero", registrytest.HasIDs("1"))
	registrytest.WaitFor(t, wb, "b loaded without go-zero", registrytest.HasIDs())

	wctx, cancel := context.WithCancel(ctx)
	wc := watch(t, wctx, m, "a")
	cancel()
	for range wc.Updates() { // closed when its context ends
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for range wa.Updates() { // closed by Close
	}
	if _, err := m.Watch(ctx, "a"); err == nil {
		t.Fatal("Watch after Close: want an error")
	}
	if _, err := legacy.NewMerged(primary, legacy.Source{Name: "x"}); err == nil {
		t.Fatal("a source without a Discovery: want an error")
	}
	if _, err := legacy.NewMerged(primary, legacy.Source{Name: legacy.PrimarySource, Discovery: primary}); err == nil {
		t.Fatal("a source named as Muster's registry: want an error")
	}
}
