package gozero_test

import (
	"context"
	"testing"
	"time"

	gzconf "github.com/zeromicro/go-zero/core/conf"
	"github.com/zeromicro/go-zero/zrpc"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// TestZRPCClientCallsMusterService is how a go-zero zrpc client reaches a
// service registered with Muster: the target "muster:///<service>" and
// Muster's resolver builder as a dial option (grpc.WithResolvers, no global
// registration). The channel runs muster_p2c: the resolver's service config
// replaces the p2c_ewma zrpc names as the channel's default.
func TestZRPCClientCallsMusterService(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := testbackend.Start(t), testbackend.Start(t)
	r := registrar(t, cli)
	for _, addr := range []string{a.Addr, b.Addr} {
		if err := r.Register(ctx, registry.Instance{Name: "user", Addr: addr}); err != nil {
			t.Fatal(err)
		}
	}

	builder := resolver.NewBuilder(discovery(t, cli), resolver.WithLogger(quiet))
	client, err := zrpc.NewClientWithTarget("muster:///user",
		zrpc.WithDialOption(grpc.WithResolvers(builder)), zrpc.WithNonBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Conn().Close()
	testbackend.CallUntil(t, client.Conn(), 10*time.Second, "both Muster backends called by a zrpc client",
		testbackend.HasAll(a.Addr, b.Addr))
}

// A zrpc client that names muster_p2c (BalancerName) on a target with a
// zone gets Muster's zone awareness: while the client's zone is healthy,
// its calls stay there.
func TestZRPCClientWithMusterP2CStaysInZone(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	near, far := testbackend.Start(t), testbackend.Start(t)
	r := registrar(t, cli)
	for _, in := range []registry.Instance{{Name: "user", Addr: near.Addr, Zone: "z1"}, {Name: "user", Addr: far.Addr, Zone: "z2"}} {
		registrytest.RegisterEventually(t, r, in) // past the registrar's 2s request timeout on a loaded machine
	}
	var conf zrpc.RpcClientConf
	if err := gzconf.FillDefault(&conf); err != nil {
		t.Fatal(err)
	}
	conf.Target, conf.BalancerName = "muster:///user?zone=z1", "muster_p2c"
	client, err := zrpc.NewClient(conf, zrpc.WithDialOption(grpc.WithResolvers(resolver.NewBuilder(discovery(t, cli), resolver.WithLogger(quiet)))))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Conn().Close()
	testbackend.CallUntil(t, client.Conn(), 10*time.Second, "the client's zone called", testbackend.HasAll(near.Addr))
	// The far backend is registered and seen too: the zone is a
	// preference, not a filter.
	w, err := discovery(t, cli).Watch(ctx, "user")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "both instances seen", registrytest.HasIDs(far.Addr, near.Addr))
	if got := testbackend.Calls(t, client.Conn(), 500); got[far.Addr] != 0 || got[near.Addr] != 500 {
		t.Fatalf("500 calls from zone z1: %v; want all in z1 (%s)", got, near.Addr)
	}
}
