package legacy_test

import (
	"context"
	"fmt"
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

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newDiscovery(t *testing.T, cli *clientv3.Client, layout etcd.Layout) *etcd.Discovery {
	t.Helper()
	d, err := etcd.NewDiscovery(cli, etcdopts.Discovery(etcd.WithLayout(layout))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func watch(t *testing.T, ctx context.Context, d registry.Discovery, service string) registry.Watcher {
	t.Helper()
	w, err := d.Watch(ctx, service)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func grant(t *testing.T, ctx context.Context, cli *clientv3.Client, ttl int64) clientv3.LeaseID {
	t.Helper()
	l, err := cli.Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return l.ID
}

func put(t *testing.T, ctx context.Context, cli *clientv3.Client, key, value string, opts ...clientv3.OpOption) {
	t.Helper()
	if _, err := cli.Put(ctx, key, value, opts...); err != nil {
		t.Fatal(err)
	}
}

// addrs returns a condition: a loaded snapshot whose instances have exactly
// these addresses, in ID order.
func addrs(want ...string) func(registry.Snapshot) bool {
	return func(s registry.Snapshot) bool {
		if !s.Loaded || len(s.Instances) != len(want) {
			return false
		}
		for i, in := range s.Instances {
			if in.Addr != want[i] {
				return false
			}
		}
		return true
	}
}

// TestGoZeroLayout writes keys as go-zero's publisher does (key
// "<Key>/<lease ID in decimal>", value "host:port", a 10 s lease) and
// follows them, their deletion and the loss of their lease; a bad value is
// skipped per key and counted, the others served.
func TestGoZeroLayout(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	g, err := legacy.NewGoZero(legacy.WithName("user", "user.rpc"))
	if err != nil {
		t.Fatal(err)
	}
	d := newDiscovery(t, cli, g)
	l1, l2 := grant(t, ctx, cli, 10), grant(t, ctx, cli, 10)
	put(t, ctx, cli, fmt.Sprintf("user.rpc/%d", l1), "127.0.0.1:9001", clientv3.WithLease(l1))
	put(t, ctx, cli, "user.rpcx/1", "127.0.0.1:9999")                   // another service sharing the prefix's start
	put(t, ctx, cli, "user.rpc/3", "127.0.0.1", clientv3.WithLease(l1)) // no port
	put(t, ctx, cli, "user.rpc/4", "garbage", clientv3.WithLease(l1))   // not an address
	w := watch(t, ctx, d, "user")
	registrytest.WaitFor(t, w, "the first go-zero instance", addrs("127.0.0.1:9001"))
	if got := d.Stats().SkippedValues; got != 2 {
		t.Fatalf("skipped %d values, want 2 (no port, garbage)", got)
	}

	put(t, ctx, cli, fmt.Sprintf("user.rpc/%d", l2), "127.0.0.1:9002", clientv3.WithLease(l2))
	s := registrytest.WaitFor(t, w, "both go-zero instances", func(s registry.Snapshot) bool { return len(s.Instances) == 2 })
	if s.Instances[0].ID != fmt.Sprint(min(l1, l2)) || s.Instances[0].Weight != registry.DefaultWeight {
		t.Fatalf("instance %+v: want the lease ID as ID and the default weight", *s.Instances[0])
	}
	if _, err := cli.Revoke(ctx, l1); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "the instance of the revoked lease gone", addrs("127.0.0.1:9002"))
	if _, err := d.Services(ctx); err == nil {
		t.Error("Services with a layout: want an error")
	}
}

// TestKratosLayout writes values as Kratos's etcd registry does and checks
// that bad values are skipped per key and counted, the others served.
func TestKratosLayout(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	k, err := legacy.NewKratos()
	if err != nil {
		t.Fatal(err)
	}
	d := newDiscovery(t, cli, k)
	lease := grant(t, ctx, cli, 15)
	good := func(id string, port int) string {
		return fmt.Sprintf(`{"id":%q,"name":"greeter","version":"v1","metadata":{"color":"blue"},"endpoints":["http://127.0.0.1:8000","grpc://127.0.0.1:%d?isSecure=false"]}`, id, port)
	}
	put(t, ctx, cli, "/microservices/greeter/a", good("a", 9001), clientv3.WithLease(lease))
	put(t, ctx, cli, "/microservices/greeter/bad-json", `not json`, clientv3.WithLease(lease))
	put(t, ctx, cli, "/microservices/greeter/no-port", `{"id":"no-port","name":"greeter","endpoints":["grpc://127.0.0.1"]}`, clientv3.WithLease(lease))
	put(t, ctx, cli, "/microservices/greeter/scheme", `{"id":"scheme","name":"greeter","endpoints":["tcp://127.0.0.1:1"]}`, clientv3.WithLease(lease))
	put(t, ctx, cli, "/microservices/greeter/other", `{"id":"other","name":"greeter2","endpoints":["grpc://127.0.0.1:2"]}`, clientv3.WithLease(lease))
	w := watch(t, ctx, d, "greeter")
	s := registrytest.WaitFor(t, w, "the good Kratos instance", registrytest.HasIDs("a"))
	in := s.Instances[0]
	if in.Addr != "127.0.0.1:9001" || in.Version != "v1" || in.Metadata["color"] != "blue" {
		t.Fatalf("instance %+v", *in)
	}
	if got := d.Stats().SkippedValues; got != 3 {
		t.Fatalf("skipped %d values, want 3 (not JSON, no port, unknown scheme)", got)
	}
	// The bad value first: events are applied in order, so once b is seen
	// the bad value has been counted.
	put(t, ctx, cli, "/microservices/greeter/bad-json", `{`, clientv3.WithLease(lease))
	put(t, ctx, cli, "/microservices/greeter/b", good("b", 9002), clientv3.WithLease(lease))
	registrytest.WaitFor(t, w, "a second Kratos instance", registrytest.HasIDs("a", "b"))
	if got := d.Stats().SkippedValues; got != 4 {
		t.Fatalf("skipped %d values, want 4", got)
	}
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "every instance gone with the lease", registrytest.HasIDs())
}

// TestNamingLayout registers with etcd's own endpoints.Manager and follows
// its additions and deletions.
func TestNamingLayout(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	n, err := legacy.NewNaming(legacy.WithName("echo", "services/echo"))
	if err != nil {
		t.Fatal(err)
	}
	d := newDiscovery(t, cli, n)
	em, err := endpoints.NewManager(cli, "services/echo")
	if err != nil {
		t.Fatal(err)
	}
	lease := grant(t, ctx, cli, 10)
	if err := em.AddEndpoint(ctx, "services/echo/127.0.0.1:9001", endpoints.Endpoint{Addr: "127.0.0.1:9001", Metadata: map[string]string{"zone": "z1"}}, clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	if err := em.AddEndpoint(ctx, "services/echo/e2", endpoints.Endpoint{Addr: "127.0.0.1:9002"}); err != nil {
		t.Fatal(err)
	}
	put(t, ctx, cli, "services/echo/bad", "127.0.0.1:9003")
	w := watch(t, ctx, d, "echo")
	s := registrytest.WaitFor(t, w, "both naming endpoints", registrytest.HasIDs("127.0.0.1:9001", "e2"))
	if s.Instances[0].Metadata["zone"] != "z1" {
		t.Fatalf("metadata %v, want zone z1", s.Instances[0].Metadata)
	}
	if got := d.Stats().SkippedValues; got != 1 {
		t.Fatalf("skipped %d values, want 1", got)
	}
	if err := em.DeleteEndpoint(ctx, "services/echo/e2"); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "the deleted endpoint gone", registrytest.HasIDs("127.0.0.1:9001"))
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "the endpoint gone with its lease", registrytest.HasIDs())
}
