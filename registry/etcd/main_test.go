package etcd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfChild()
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// quiet discards the library's logs; failures are reported by assertions.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fast returns a Store's options with short timers for tests, under
// prefix.
func fast(prefix string, extra ...etcd.StoreOption) []etcd.StoreOption {
	return etcdopts.Fast(append([]etcd.StoreOption{etcd.WithPrefix(prefix)}, extra...)...)
}

// reg returns a Registrar's options with short timers for tests, under
// prefix.
func reg(prefix string, extra ...etcd.RegistrarOption) []etcd.RegistrarOption {
	return etcdopts.Registrar(append([]etcd.RegistrarOption{etcd.WithPrefix(prefix)}, extra...)...)
}

// disc returns a Discovery's options with short timers for tests, under
// prefix.
func disc(prefix string, extra ...etcd.DiscoveryOption) []etcd.DiscoveryOption {
	return etcdopts.Discovery(append([]etcd.DiscoveryOption{etcd.WithPrefix(prefix)}, extra...)...)
}

// watching returns the options of the settings' followers (NewCanaries,
// NewPolicies) with short timers for tests, under prefix.
func watching(prefix string, extra ...etcd.WatchOption) []etcd.WatchOption {
	return etcdopts.Watch(append([]etcd.WatchOption{etcd.WithPrefix(prefix)}, extra...)...)
}

// at returns the options of a read (GetPolicy, GetPolicyInfo, History) for
// tests, under prefix.
func at(prefix string) []etcd.Option {
	return etcdopts.Read(etcd.WithPrefix(prefix))
}

// writes returns an operator write's options for tests, under prefix.
func writes(prefix string, extra ...etcd.WriteOption) []etcd.WriteOption {
	return etcdopts.Write(append([]etcd.WriteOption{etcd.WithPrefix(prefix)}, extra...)...)
}

func newRegistrar(t *testing.T, cli *clientv3.Client, opts ...etcd.RegistrarOption) *etcd.Registrar {
	t.Helper()
	r, err := etcd.NewRegistrar(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func newDiscovery(t *testing.T, cli *clientv3.Client, opts ...etcd.DiscoveryOption) *etcd.Discovery {
	t.Helper()
	d, err := etcd.NewDiscovery(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// rawKeys returns the keys under a prefix and the lease of each, read
// directly from etcd.
func rawKeys(t testing.TB, cli *clientv3.Client, prefix string) (keys []string, leases map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("get %s: %v", prefix, err)
	}
	leases = map[string]int64{}
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
		leases[string(kv.Key)] = kv.Lease
	}
	sort.Strings(keys)
	return keys, leases
}

func instance(name, id string, port int) registry.Instance {
	return registry.Instance{Name: name, ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", port)}
}

// registerAndWatch registers instance a of service svc with r and returns a
// watch of svc through d that has seen it; the watch closes with the test.
func registerAndWatch(t *testing.T, ctx context.Context, r *etcd.Registrar, d *etcd.Discovery) registry.Watcher {
	t.Helper()
	if err := r.Register(ctx, instance("svc", "a", 9001)); err != nil {
		t.Fatal(err)
	}
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	return w
}
