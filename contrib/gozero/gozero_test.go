package gozero_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/zeromicro/go-zero/core/discov"
	"github.com/zeromicro/go-zero/core/logx"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
	"github.com/musterhq/muster/resolver"
)

// goZeroKey is the service's Etcd.Key in go-zero's configuration.
const goZeroKey = "user.rpc"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func init() { logx.Disable() }

func layout(t *testing.T) *legacy.GoZero {
	t.Helper()
	g, err := legacy.NewGoZero(legacy.WithName("user", goZeroKey))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func registrar(t *testing.T, cli *clientv3.Client, opts ...etcd.RegistrarOption) *etcd.Registrar {
	t.Helper()
	r, err := etcd.NewRegistrar(cli, etcdopts.Registrar(opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func discovery(t *testing.T, cli *clientv3.Client, opts ...etcd.DiscoveryOption) *etcd.Discovery {
	t.Helper()
	d, err := etcd.NewDiscovery(cli, etcdopts.Discovery(opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// mergedChannel returns a Muster channel (round robin, no empty-list
// protection) on service "user" merged from Muster's layout and go-zero's.
func mergedChannel(t *testing.T, cli *clientv3.Client) *grpc.ClientConn {
	t.Helper()
	merged, err := legacy.NewMerged(discovery(t, cli),
		legacy.Source{Name: "go-zero", Discovery: discovery(t, cli, etcd.WithLayout(layout(t)))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = merged.Close() })
	conn, err := grpc.NewClient("muster:///user", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithResolvers(resolver.NewBuilder(merged, resolver.WithProtection(0, time.Second), resolver.WithLogger(quiet))),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`), grpc.WithDisableServiceConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// onlyCalled is a CallUntil condition: 20 calls in a row reached want, none
// gone.
func onlyCalled(gone, want string) func(map[string]int) bool {
	return func(counts map[string]int) bool {
		if counts[gone] > 0 {
			clear(counts) // start the streak again
		}
		return counts[want] >= 20
	}
}

// gozeroAndMuster starts two backends, publishes the old one with go-zero's
// publisher (through the cluster's proxies) and registers the migrated one
// with Muster through cli, and returns a merged Muster channel that has
// called both.
func gozeroAndMuster(t *testing.T, c *etcdtest.Cluster, cli *clientv3.Client) (pub *discov.Publisher, conn *grpc.ClientConn, old, migrated *testbackend.Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old, migrated = testbackend.Start(t), testbackend.Start(t)
	pub = discov.NewPublisher(c.Endpoints(), goZeroKey, old.Addr)
	if err := pub.KeepAlive(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Stop)
	if err := registrar(t, cli).Register(ctx, registry.Instance{Name: "user", Addr: migrated.Addr}); err != nil {
		t.Fatal(err)
	}
	conn = mergedChannel(t, cli)
	testbackend.CallUntil(t, conn, 10*time.Second, "both backends called", testbackend.HasAll(old.Addr, migrated.Addr))
	return pub, conn, old, migrated
}

// TestMusterChannelCallsGoZeroServer publishes a backend with go-zero's own
// publisher and calls it through a Muster channel on the merged service,
// next to a backend registered with Muster, until go-zero withdraws it.
func TestMusterChannelCallsGoZeroServer(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	pub, conn, old, migrated := gozeroAndMuster(t, c, cli)

	pub.Stop() // go-zero revokes its lease
	testbackend.CallUntil(t, conn, 10*time.Second, "only the Muster backend called after go-zero's Stop",
		onlyCalled(old.Addr, migrated.Addr))
}

// TestGoZeroSubscriberFindsDualWrittenServer registers a Muster instance
// with a mirror in go-zero's layout and follows it with go-zero's own
// subscriber (what a zrpc client resolves with), until the registrar closes.
func TestGoZeroSubscriberFindsDualWrittenServer(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := registrar(t, cli, etcd.WithMirror(layout(t)))
	const addr = "127.0.0.1:9001"
	if err := r.Register(ctx, registry.Instance{Name: "user", Addr: addr}); err != nil {
		t.Fatal(err)
	}
	sub, err := discov.NewSubscriber(c.Endpoints(), goZeroKey)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	changed := make(chan struct{}, 1)
	sub.AddListener(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	waitValues := func(what string, want ...string) {
		t.Helper()
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		for !slices.Equal(sub.Values(), want) {
			select {
			case <-changed:
			case <-timer.C:
				t.Fatalf("go-zero's subscriber: %s: values %v after 10s, want %v", what, sub.Values(), want)
			}
		}
	}
	waitValues("the dual-written instance", addr)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	waitValues("nothing once the registrar closed")
}
