package clusters_test

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/clusters"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// arrivalsCC is a resolver's ClientConn marking the endpoint count of
// every state it is given.
type arrivalsCC struct{ a *registrytest.Arrivals }

func (c arrivalsCC) UpdateState(s grpcresolver.State) error {
	c.a.Mark(len(s.Endpoints), time.Now())
	return nil
}
func (arrivalsCC) ReportError(error)                                    {}
func (arrivalsCC) NewAddress([]grpcresolver.Address)                    {}
func (arrivalsCC) ParseServiceConfig(string) *serviceconfig.ParseResult { return nil }

// convergencePath returns a SideBySide path: register instance i with
// registrars[i%len] and wait until the resolver over d hands a state of
// i+1 endpoints to its ClientConn.
func convergencePath(b *testing.B, d registry.Discovery, registrars ...*etcd.Registrar) func(int) time.Duration {
	seen := registrytest.NewArrivals()
	r, err := resolver.NewBuilder(d, resolver.WithLogger(quiet)).Build(
		grpcresolver.Target{URL: url.URL{Scheme: "muster", Path: "/svc"}}, arrivalsCC{seen}, grpcresolver.BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	seen.Wait(b, 0)
	return func(i int) time.Duration {
		start := time.Now()
		in := registry.Instance{Name: "svc", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
		if err := registrars[i%len(registrars)].Register(context.Background(), in); err != nil {
			b.Fatal(err)
		}
		return seen.Wait(b, i+1).Sub(start)
	}
}

func benchDiscovery(b *testing.B, cli *clientv3.Client, prefix string) *etcd.Discovery {
	d, err := etcd.NewDiscovery(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	return d
}

func benchRegistrar(b *testing.B, cli *clientv3.Client, prefix string) *etcd.Registrar {
	r, err := etcd.NewRegistrar(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	return r
}

// BenchmarkConvergence measures Register → the resolver's UpdateState
// through one etcd Discovery and through a Discovery over two etcd
// clusters (registrations alternating between them), side by side in one
// run (registrytest.SideBySide). Run with -benchtime 300x or more.
func BenchmarkConvergence(b *testing.B) {
	ca, cb := etcdtest.Start(b), etcdtest.Start(b)
	cliA, cliB := ca.Client(b, ca.DirectEndpoints()...), cb.Client(b, cb.DirectEndpoints()...)
	single := convergencePath(b, benchDiscovery(b, cliA, "/single"), benchRegistrar(b, cliA, "/single"))
	u, err := clusters.New(
		clusters.Cluster{Name: "a", Discovery: benchDiscovery(b, cliA, "/union")},
		clusters.Cluster{Name: "b", Discovery: benchDiscovery(b, cliB, "/union")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = u.Close() })
	union := convergencePath(b, u, benchRegistrar(b, cliA, "/union"), benchRegistrar(b, cliB, "/union"))
	p50 := registrytest.SideBySide(b,
		registrytest.Path{Name: "single", Once: single},
		registrytest.Path{Name: "two-clusters", Once: union})
	b.ReportMetric(float64(p50["two-clusters"])/float64(p50["single"]), "two-clusters/single")
}

// BenchmarkMemory reports the heap per instance held by one etcd
// Discovery that loaded 10,000 instances of one service, and what a
// Discovery over that cluster and an empty one adds to it (the union's
// tagged copies: the etcd Discovery's cache is shared, one watch per
// service), both measured in one run.
func BenchmarkMemory(b *testing.B) {
	const n = 10000
	ca, cb := etcdtest.Start(b), etcdtest.Start(b)
	cliA, cliB := ca.Client(b, ca.DirectEndpoints()...), cb.Client(b, cb.DirectEndpoints()...)
	ctx := context.Background()
	registrytest.PutMemoryFixture(b, cliA, "big", n)
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// loaded watches big on d until it has every instance.
	loaded := func(d registry.Discovery) registry.Watcher {
		w, err := d.Watch(ctx, "big")
		if err != nil {
			b.Fatal(err)
		}
		for s := w.Snapshot(); len(s.Instances) != n; s = w.Snapshot() {
			<-w.Updates()
		}
		return w
	}
	openEtcd := func(cli *clientv3.Client) *etcd.Discovery {
		d, err := etcd.NewDiscovery(cli, etcd.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	var single, extra float64
	for i := 0; i < b.N; i++ {
		h0 := heap()
		da := openEtcd(cliA)
		wa := loaded(da)
		h1 := heap()
		db := openEtcd(cliB)
		u, err := clusters.New(clusters.Cluster{Name: "a", Discovery: da}, clusters.Cluster{Name: "b", Discovery: db})
		if err != nil {
			b.Fatal(err)
		}
		wu := loaded(u)
		h2 := heap()
		runtime.KeepAlive(wa)
		runtime.KeepAlive(wu)
		single = float64(int64(h1)-int64(h0)) / n
		extra = float64(int64(h2)-int64(h1)) / n
		_ = u.Close()
		_ = db.Close()
		_ = da.Close()
	}
	b.ReportMetric(single, "single-heap-B/instance")
	b.ReportMetric(extra, "union-extra-heap-B/instance")
	b.ReportMetric(0, "ns/op")
}
