package gozero_test

import (
	"context"
	"testing"
	"time"

	"github.com/zeromicro/go-zero/zrpc"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// TestZRPCClientCallsMusterService is how a go-zero zrpc client reaches a
// service registered with Muster: the target "muster:///<service>" and
// Muster's resolver builder as a dial option (grpc.WithResolvers, no global
// registration). zrpc keeps its own balancer (p2c_ewma).
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
