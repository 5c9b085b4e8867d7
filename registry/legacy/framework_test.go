package legacy_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	etcdresolver "go.etcd.io/etcd/client/v3/naming/resolver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
	"github.com/musterhq/muster/resolver"
)

// The frameworks' own code: etcd's endpoints.Manager registers and its
// naming resolver discovers. (go-zero's and Kratos's are not served by
// this machine's Go module proxy.)

func dial(t *testing.T, target string, b grpcresolver.Builder) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(b),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`), grpc.WithDisableServiceConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// onlyCalls makes calls on conn until 20 in a row reached addr, failing t
// after 10s.
func onlyCalls(t *testing.T, conn *grpc.ClientConn, addr, what string) {
	t.Helper()
	testbackend.CallUntil(t, conn, 10*time.Second, what, func(counts map[string]int) bool {
		if len(counts) > 1 || (len(counts) == 1 && counts[addr] == 0) {
			clear(counts) // another backend was called: start the streak again
		}
		return counts[addr] >= 20
	})
}

// TestMusterChannelCallsNamingBackends registers backends with etcd's own
// endpoints.Manager and calls them through a Muster channel on the merged
// service, which follows their deregistration and lease expiry; a channel
// filtering on the source calls Muster's backend only.
func TestMusterChannelCallsNamingBackends(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 60*time.Second)
	a, b, m := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	em, err := endpoints.NewManager(cli, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := em.AddEndpoint(ctx, "echo/"+a.Addr, endpoints.Endpoint{Addr: a.Addr}); err != nil {
		t.Fatal(err)
	}
	expiring := grant(t, ctx, cli, 2) // never kept alive
	if err := em.AddEndpoint(ctx, "echo/"+b.Addr, endpoints.Endpoint{Addr: b.Addr}, clientv3.WithLease(expiring)); err != nil {
		t.Fatal(err)
	}
	r, err := etcd.NewRegistrar(cli, etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.Register(ctx, registry.Instance{Name: "echo", Addr: m.Addr}); err != nil {
		t.Fatal(err)
	}
	_, _, n := mustLayouts(t)
	merged, err := legacy.NewMerged(newPrimary(t, cli), legacy.Source{Name: "etcd-naming", Discovery: newDiscovery(t, cli, n)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = merged.Close() })
	builder := resolver.NewBuilder(merged, resolver.WithProtection(0, time.Second), resolver.WithLogger(quiet))
	conn := dial(t, "muster:///echo", builder)
	testbackend.CallUntil(t, conn, 10*time.Second, "every backend called", testbackend.HasAll(a.Addr, b.Addr, m.Addr))
	// The source is metadata: a target can keep the migrated servers.
	onlyCalls(t, dial(t, "muster:///echo?meta."+legacy.SourceKey+"="+legacy.PrimarySource, builder), m.Addr,
		"only the Muster backend called through a filter on its source")
	// b's lease expires (TTL 2s, never renewed) and a is deleted.
	if err := em.DeleteEndpoint(ctx, "echo/"+a.Addr); err != nil {
		t.Fatal(err)
	}
	onlyCalls(t, conn, m.Addr, "only the Muster backend called after a's deletion and b's lease expiry")
}

// TestNamingResolverCallsDualWrittenServer registers a Muster backend with
// a mirror in etcd naming's layout and calls it through etcd's own naming
// resolver, until the registrar closes.
func TestNamingResolverCallsDualWrittenServer(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 60*time.Second)
	m := testbackend.Start(t)
	_, _, n := mustLayouts(t, legacy.WithName("echo", "services/echo"))
	r, err := etcd.NewRegistrar(cli, etcdopts.Registrar(etcd.WithMirror(n))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.Register(ctx, registry.Instance{Name: "echo", Addr: m.Addr}); err != nil {
		t.Fatal(err)
	}
	eb, err := etcdresolver.NewBuilder(cli)
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, "etcd:///services/echo", eb)
	testbackend.CallUntil(t, conn, 10*time.Second, "the Muster backend called by etcd's resolver", testbackend.HasAll(m.Addr))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := testbackend.Call(cctx, conn)
		cancel()
		if err != nil {
			break // etcd's resolver dropped the instance
		}
		if time.Now().After(deadline) {
			t.Fatal("etcd's resolver still calls the backend 10s after the registrar closed")
		}
	}
}
