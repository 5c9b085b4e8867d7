package gozero_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zeromicro/go-zero/zrpc"
	zresolver "github.com/zeromicro/go-zero/zrpc/resolver"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// hosts returns the cluster's proxied endpoints as go-zero's EtcdConf.Hosts
// lists them: host:port.
func hosts(c *etcdtest.Cluster) []string {
	var out []string
	for _, e := range c.Endpoints() {
		out = append(out, strings.TrimPrefix(e, "http://"))
	}
	return out
}

// TestZRPCEtcdResolverCallsDualWrittenServer calls a Muster backend that
// dual-writes go-zero's layout from a zrpc client configured the go-zero
// way (Etcd.Hosts + Etcd.Key, go-zero's own etcd resolver), until the
// registrar closes.
func TestZRPCEtcdResolverCallsDualWrittenServer(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := testbackend.Start(t)
	r := registrar(t, cli, etcd.WithMirror(layout(t)))
	if err := r.Register(ctx, registry.Instance{Name: "user", Addr: b.Addr}); err != nil {
		t.Fatal(err)
	}
	client, err := zrpc.NewClientWithTarget(zresolver.BuildDiscovTarget(hosts(c), goZeroKey), zrpc.WithNonBlock())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Conn().Close()
	testbackend.CallUntil(t, client.Conn(), 10*time.Second, "the Muster backend called by go-zero's resolver", testbackend.HasAll(b.Addr))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := testbackend.Call(cctx, client.Conn())
		ccancel()
		if err != nil {
			break // go-zero's resolver dropped the instance
		}
		if time.Now().After(deadline) {
			t.Fatal("go-zero's resolver still calls the backend 10s after the registrar closed")
		}
	}
}

// TestMusterChannelFollowsGoZeroLeaseExpiry cuts a go-zero publisher off
// etcd (its connection stalls, as in a partition) until its lease expires
// (go-zero's TTL: 10s), and checks that a Muster channel, connected
// directly, stops calling it.
func TestMusterChannelFollowsGoZeroLeaseExpiry(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t, c.DirectEndpoints()...)
	_, conn, old, migrated := gozeroAndMuster(t, c, cli)

	c.Members()[0].Stall() // go-zero's keepalives stop reaching etcd
	defer c.Members()[0].Heal()
	testbackend.CallUntil(t, conn, 30*time.Second, "only the Muster backend called once go-zero's lease expired",
		onlyCalled(old.Addr, migrated.Addr))
}
