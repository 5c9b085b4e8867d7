package xds_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/balancer/p2c"
	"github.com/musterhq/muster/balancer/wrr"
	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
	"github.com/musterhq/muster/xds"
)

// BenchmarkLocalityFailover compares, on the same registry and in the same
// run, how the contenders keep a client's calls in its zone and leave the
// zone when it fails: muster_p2c and muster_wrr through the Muster
// resolver, and grpc-go's xDS priority policy (round robin within a
// priority) through Muster's control plane, fed the same instances. Each
// iteration gives each contender a service of its own: 3 backends in zone
// z1 and 3 in z2, both of region r1, the client in r1/z1. Reported per
// contender: cross-zone-% (the share of 2,000 calls outside z1, all
// healthy) and ms-to-2% (from z1's backends failing every call, still
// registered, to a window of 100 calls with at most 2 in z1; 10,000 when
// not reached within 10 s).
//
//	go test -run '^$' -bench LocalityFailover -benchtime 3x ./xds/
func BenchmarkLocalityFailover(b *testing.B) {
	c := etcdtest.Start(b)
	cli := c.Client(b)
	reg, err := etcd.NewRegistrar(cli, etcdopts.Registrar()...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = reg.Close() })
	disc, err := etcd.NewDiscovery(cli, etcdopts.Discovery()...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = disc.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cp, err := xds.New(disc, xds.WithLogger(quiet), xds.WithListInterval(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- cp.Serve(context.Background(), lis) }()
	b.Cleanup(func() { _ = cp.Close(); <-served })
	builder := resolver.NewBuilder(disc, resolver.WithLogger(quiet), resolver.WithRegion("r1"), resolver.WithZone("z1"))
	muster := func(policy string) func(string) (*grpc.ClientConn, error) {
		return func(service string) (*grpc.ClientConn, error) {
			return grpc.NewClient("muster:///"+service, grpc.WithResolvers(builder),
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}]}`, policy)), grpc.WithDisableServiceConfig())
		}
	}
	contenders := []struct {
		name string
		dial func(service string) (*grpc.ClientConn, error)
	}{
		{"muster_p2c", muster(p2c.Name)},
		{"muster_wrr", muster(wrr.Name)},
		{"xds_priority", func(service string) (*grpc.ClientConn, error) {
			rb, err := xdsResolverFor(bootstrapIn(lis.Addr().String(), "bench-"+service, "r1", "z1"))
			if err != nil {
				return nil, err
			}
			return grpc.NewClient("xds:///"+service, grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
		}},
	}
	cross := make([]float64, len(contenders))
	took := make([]float64, len(contenders))
	n := 0
	for b.Loop() {
		for ci, ct := range contenders {
			service := fmt.Sprintf("loc-%d-%d", n, ci)
			cr, ms := localityRun(b, reg, service, ct.dial)
			cross[ci] += cr
			took[ci] += ms
		}
		n++
	}
	for ci, ct := range contenders {
		b.ReportMetric(100*cross[ci]/float64(n), ct.name+"-cross-zone-%")
		b.ReportMetric(took[ci]/float64(n), ct.name+"-ms-to-2%")
	}
}

// localityRun runs one contender's round on a new service and returns its
// cross-zone share and its milliseconds to 2 %.
func localityRun(b *testing.B, reg *etcd.Registrar, service string, dial func(string) (*grpc.ClientConn, error)) (cross, ms float64) {
	var z1 []*testbackend.Backend
	inZ1 := map[string]bool{}
	for i := range 6 {
		be := testbackend.Start(b)
		zone := "z1"
		if i >= 3 {
			zone = "z2"
		} else {
			z1 = append(z1, be)
			inZ1[be.Addr] = true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := reg.Register(ctx, registry.Instance{Name: service, ID: fmt.Sprint("i", i), Addr: be.Addr, Region: "r1", Zone: zone})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	conn, err := dial(service)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	testbackend.CallUntil(b, conn, 20*time.Second, "every z1 backend called", func(m map[string]int) bool {
		for a := range inZ1 {
			if m[a] == 0 {
				return false
			}
		}
		return true
	})
	out, total := 0, 0
	for range 2000 {
		if addr, err := call(conn); err == nil {
			total++
			if !inZ1[addr] {
				out++
			}
		}
	}
	for _, be := range z1 {
		be.SetFailing(true)
	}
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		here := 0
		for range 100 {
			addr, err := call(conn)
			if err != nil || inZ1[addr] {
				here++ // a failed call was one sent to z1
			}
		}
		if here <= 2 {
			return float64(out) / float64(max(total, 1)), float64(time.Since(start).Milliseconds())
		}
	}
	return float64(out) / float64(max(total, 1)), 10000
}

func call(conn *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return testbackend.Call(ctx, conn)
}
