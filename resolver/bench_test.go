package resolver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"google.golang.org/grpc/serviceconfig"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	etcdnaming "go.etcd.io/etcd/client/v3/naming/resolver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/resolvertest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// The benchmarks measure resolvers, not connections: channels use a
// balancer that accepts states and dials nothing. Its config names an
// Arrivals in settled, which it marks with the endpoint count of every state
// it gets, so that a benchmark can wait until a change has gone all the way
// through the channel before it makes the next one.
const noopBalancer = "muster_bench_noop"

var (
	registerNoop sync.Once
	settled      sync.Map // config key -> *registrytest.Arrivals
	settledKeys  atomic.Uint64
)

type noopBuilder struct{}

func (noopBuilder) Build(balancer.ClientConn, balancer.BuildOptions) balancer.Balancer { return noop{} }
func (noopBuilder) Name() string                                                       { return noopBalancer }

type noopConfig struct {
	serviceconfig.LoadBalancingConfig
	Settled string `json:"settled"`
}

func (noopBuilder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var c noopConfig
	err := json.Unmarshal(js, &c)
	return &c, err
}

type noop struct{}

func (noop) UpdateClientConnState(s balancer.ClientConnState) error {
	if c, ok := s.BalancerConfig.(*noopConfig); ok {
		if a, ok := settled.Load(c.Settled); ok {
			a.(*registrytest.Arrivals).Mark(len(s.ResolverState.Endpoints), time.Now())
		}
	}
	return nil
}
func (noop) ResolverError(error)                                        {}
func (noop) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (noop) Close()                                                     {}
func (noop) ExitIdle()                                                  {}

// openChannel opens a channel on target, resolved by bld, and returns the
// Arrivals its balancer marks.
func openChannel(b *testing.B, bld grpcresolver.Builder, target string) *registrytest.Arrivals {
	registerNoop.Do(func() { balancer.Register(noopBuilder{}) })
	key := fmt.Sprint(settledKeys.Add(1))
	arrivals := registrytest.NewArrivals()
	settled.Store(key, arrivals)
	conn, err := grpc.NewClient(target, grpc.WithResolvers(bld),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+noopBalancer+`":{"settled":"`+key+`"}}]}`), grpc.WithDisableServiceConfig())
	if err != nil {
		b.Fatal(err)
	}
	conn.Connect()
	b.Cleanup(func() {
		_ = conn.Close()
		settled.Delete(key)
	})
	return arrivals
}

// BenchmarkConvergence measures a new registration's way to a real
// ClientConn's UpdateState, one registration at a time, on one embedded
// server, for four paths: the floor (a raw Put seen by a raw Watch),
// Muster's resolver fed by Registrar.Register and by a raw Put of the
// same value, and etcd's own naming resolver (endpoints.Manager.AddEndpoint
// → UpdateState). The paths take turns within each iteration (in a
// rotating order), so they share the machine's state and their ratios are
// measured side by side rather than minutes apart; each service grows by
// one instance per iteration. It reports p50 and p99 per path and the
// ratios of the p50s. Run with -benchtime 300x or more.
func BenchmarkConvergence(b *testing.B) {
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	floor := registrytest.NewRawPutWatch(b, cli)
	paths := []registrytest.Path{
		{Name: "floor", Once: func(i int) time.Duration { return floor.Once(b, i) }},
		{Name: "muster-register", Once: musterPath(b, cli, func(prefix string) func(context.Context, registry.Instance) error {
			reg, err := etcd.NewRegistrar(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = reg.Close() })
			return reg.Register
		})},
		{Name: "muster-put", Once: musterPath(b, cli, func(prefix string) func(context.Context, registry.Instance) error {
			return func(ctx context.Context, in registry.Instance) error {
				val, err := registry.Marshal(in)
				if err != nil {
					return err
				}
				_, err = cli.Put(ctx, registry.Key(prefix, in.Name, in.ID), string(val))
				return err
			}
		})},
		{Name: "etcd-naming", Once: etcdNamingPath(b, cli)},
	}
	p50 := registrytest.SideBySide(b, paths...)
	ratio := func(a, b string) float64 { return float64(p50[a]) / float64(p50[b]) }
	b.ReportMetric(ratio("muster-register", "floor"), "register/floor")
	b.ReportMetric(ratio("muster-register", "etcd-naming"), "register/etcd-naming")
	b.ReportMetric(ratio("etcd-naming", "floor"), "etcd-naming/floor")
}

// musterPath returns the once function of a path that adds instances with
// the function made by newAdd (given the path's etcd prefix) and waits for
// them at a channel resolving through a Discovery.
func musterPath(b *testing.B, cli *clientv3.Client, newAdd func(prefix string) func(context.Context, registry.Instance) error) func(int) time.Duration {
	prefix := fmt.Sprintf("/bench-%d", time.Now().UnixNano())
	disc, err := etcd.NewDiscovery(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = disc.Close() })
	add := newAdd(prefix)
	seen := registrytest.NewArrivals()
	done := openChannel(b, resolvertest.RecordingBuilder{Builder: resolver.NewBuilder(disc, resolver.WithLogger(quiet)), OnUpdate: seen.Mark}, "muster:///svc")
	done.Wait(b, 0)
	return func(i int) time.Duration {
		start := time.Now()
		in := registry.Instance{Name: "svc", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
		if err := add(context.Background(), in); err != nil {
			b.Fatal(err)
		}
		d := seen.Wait(b, i+1).Sub(start)
		done.Wait(b, i+1)
		return d
	}
}

// etcdNamingPath is musterPath for etcd's naming resolver.
func etcdNamingPath(b *testing.B, cli *clientv3.Client) func(int) time.Duration {
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
	done := openChannel(b, resolvertest.RecordingBuilder{Builder: nb, OnUpdate: seen.Mark}, "etcd:///"+target)
	return func(i int) time.Duration {
		start := time.Now()
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+i)
		if err := em.AddEndpoint(context.Background(), target+"/"+addr, endpoints.Endpoint{Addr: addr}); err != nil {
			b.Fatal(err)
		}
		d := seen.Wait(b, i+1).Sub(start)
		done.Wait(b, i+1)
		return d
	}
}
