package resolver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	etcdnaming "go.etcd.io/etcd/client/v3/naming/resolver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/etcdtest"
	"github.com/musterhq/muster/internal/registrytest"
	"github.com/musterhq/muster/internal/resolvertest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// The benchmarks measure resolvers, not connections: channels use a
// balancer that accepts states and dials nothing.
const noopBalancer = "muster_bench_noop"

type noopBuilder struct{}

func (noopBuilder) Build(balancer.ClientConn, balancer.BuildOptions) balancer.Balancer { return noop{} }
func (noopBuilder) Name() string                                                       { return noopBalancer }

type noop struct{}

func (noop) UpdateClientConnState(balancer.ClientConnState) error       { return nil }
func (noop) ResolverError(error)                                        {}
func (noop) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (noop) Close()                                                     {}
func (noop) ExitIdle()                                                  {}

var registerNoop sync.Once

func openChannel(b *testing.B, bld grpcresolver.Builder, target string) {
	registerNoop.Do(func() { balancer.Register(noopBuilder{}) })
	conn, err := grpc.NewClient(target, grpc.WithResolvers(bld),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+noopBalancer+`":{}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	conn.Connect()
	b.Cleanup(func() { _ = conn.Close() })
}

// BenchmarkConvergence measures a new registration's way to a real
// ClientConn's UpdateState: the floor (a raw Put seen by a raw Watch),
// Muster's resolver (Registrar.Register → UpdateState) and etcd's own
// naming resolver (endpoints.Manager.AddEndpoint → UpdateState), on one
// embedded server. Run with -benchtime 300x or more.
func BenchmarkConvergence(b *testing.B) {
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)

	b.Run("floor=raw-put-watch", func(b *testing.B) { registrytest.BenchRawPutWatch(b, cli) })

	b.Run("muster=register-updatestate", func(b *testing.B) {
		var reg *etcd.Registrar
		benchMuster(b, cli, func(ctx context.Context, prefix string, in registry.Instance) error {
			if reg == nil {
				var err error
				if reg, err = etcd.NewRegistrar(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet)); err != nil {
					return err
				}
				b.Cleanup(func() { _ = reg.Close() })
			}
			return reg.Register(ctx, in)
		})
	})

	b.Run("muster=raw-put-updatestate", func(b *testing.B) {
		benchMuster(b, cli, func(ctx context.Context, prefix string, in registry.Instance) error {
			val, err := registry.Marshal(in)
			if err != nil {
				return err
			}
			_, err = cli.Put(ctx, registry.Key(prefix, in.Name, in.ID), string(val))
			return err
		})
	})

	b.Run("etcd-naming=add-endpoint-updatestate", func(b *testing.B) {
		target := fmt.Sprintf("bench-naming-%d", time.Now().UnixNano())
		em, err := endpoints.NewManager(cli, target)
		if err != nil {
			b.Fatal(err)
		}
		nb, err := etcdnaming.NewBuilder(cli)
		if err != nil {
			b.Fatal(err)
		}
		seen := registrytest.NewArrivals()
		openChannel(b, resolvertest.RecordingBuilder{Builder: nb, OnUpdate: seen.Mark}, "etcd:///"+target)
		ctx := context.Background()
		var lat []time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			addr := fmt.Sprintf("127.0.0.1:%d", 20000+i)
			if err := em.AddEndpoint(ctx, target+"/"+addr, endpoints.Endpoint{Addr: addr}); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, seen.Wait(b, i+1).Sub(start))
		}
		registrytest.ReportPercentiles(b, lat)
	})
}

// benchMuster times add(instance i) until a channel resolving through
// Muster gets a state with i+1 endpoints.
func benchMuster(b *testing.B, cli *clientv3.Client, add func(ctx context.Context, prefix string, in registry.Instance) error) {
	prefix := fmt.Sprintf("/bench-%s-%d", b.Name(), time.Now().UnixNano())
	disc, err := etcd.NewDiscovery(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer disc.Close()
	seen := registrytest.NewArrivals()
	openChannel(b, resolvertest.RecordingBuilder{Builder: resolver.NewBuilder(disc, resolver.WithLogger(quiet)), OnUpdate: seen.Mark}, "muster:///svc")
	seen.Wait(b, 0)
	ctx := context.Background()
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		in := registry.Instance{Name: "svc", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
		if err := add(ctx, prefix, in); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, seen.Wait(b, i+1).Sub(start))
	}
	registrytest.ReportPercentiles(b, lat)
}

// BenchmarkFanOut opens 1,000 channels on one service through one
// Discovery and measures how long one registration takes to reach all of
// them (p50, p99 and max over the channels), and how many etcd watches the
// server holds for them.
func BenchmarkFanOut(b *testing.B) {
	const channels = 1000
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	base := etcdtest.WatcherCount(b)
	reg, err := etcd.NewRegistrar(cli, etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	disc, err := etcd.NewDiscovery(cli, etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer disc.Close()
	bld := resolver.NewBuilder(disc, resolver.WithLogger(quiet))
	seen := make([]*registrytest.Arrivals, channels)
	for i := range seen {
		seen[i] = registrytest.NewArrivals()
		openChannel(b, resolvertest.RecordingBuilder{Builder: bld, OnUpdate: seen[i].Mark}, "muster:///fan")
	}
	for _, s := range seen {
		s.Wait(b, 0)
	}
	var all []time.Duration
	var worst time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		in := registry.Instance{Name: "fan", ID: fmt.Sprint(i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
		if err := reg.Register(context.Background(), in); err != nil {
			b.Fatal(err)
		}
		for _, s := range seen {
			d := s.Wait(b, i+1).Sub(start)
			all = append(all, d)
			worst = max(worst, d)
		}
	}
	registrytest.ReportPercentiles(b, all)
	b.ReportMetric(float64(worst.Microseconds()), "max-µs")
	b.ReportMetric(etcdtest.WatcherCount(b)-base, "etcd-watches")
}
