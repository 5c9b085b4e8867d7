package etcd_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// BenchmarkConvergence measures how long a new registration takes to reach a
// watcher, one registration at a time, on one embedded server: the floor
// (a raw etcd Put seen by a raw Watch) and Muster (a raw Put of an instance
// value, and Registrar.Register, seen in a Discovery snapshot). The paths
// take turns within each iteration, in a rotating order, so that they are
// measured side by side. Run with -benchtime 300x or more for stable
// percentiles.
func BenchmarkConvergence(b *testing.B) {
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	floor := registrytest.NewRawPutWatch(b, cli)
	var reg *etcd.Registrar
	paths := []registrytest.Path{
		{Name: "floor", Once: func(i int) time.Duration { return floor.Once(b, i) }},
		{Name: "put-discovery", Once: discoveryPath(b, cli, func(ctx context.Context, prefix string, i int) error {
			in := instance("svc", fmt.Sprintf("i%06d", i), 9000)
			val, err := registry.Marshal(in)
			if err != nil {
				return err
			}
			_, err = cli.Put(ctx, registry.Key(prefix, in.Name, in.ID), string(val))
			return err
		})},
		{Name: "register-discovery", Once: discoveryPath(b, cli, func(ctx context.Context, prefix string, i int) error {
			if reg == nil {
				var err error
				if reg, err = etcd.NewRegistrar(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet)); err != nil {
					return err
				}
				b.Cleanup(func() { _ = reg.Close() })
			}
			return reg.Register(ctx, instance("svc", fmt.Sprintf("i%06d", i), 9000))
		})},
	}
	p50 := registrytest.SideBySide(b, paths...)
	b.ReportMetric(float64(p50["register-discovery"])/float64(p50["floor"]), "register/floor")
}

// discoveryPath returns a function that makes change i with add and
// returns how long it took to reach a Discovery snapshot.
func discoveryPath(b *testing.B, cli *clientv3.Client, add func(ctx context.Context, prefix string, i int) error) func(int) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	prefix := fmt.Sprintf("/bench-%d", time.Now().UnixNano())
	d, err := etcd.NewDiscovery(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		b.Fatal(err)
	}
	seen := registrytest.NewArrivals()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range w.Updates() {
			// Instances are only added, so a snapshot of n instances
			// is the arrival of instance n-1.
			if n := len(w.Snapshot().Instances); n > 0 {
				seen.Mark(n-1, time.Now())
			}
		}
	}()
	b.Cleanup(func() {
		cancel()
		_ = w.Close()
		<-done
		_ = d.Close()
	})
	return func(i int) time.Duration {
		start := time.Now()
		if err := add(ctx, prefix, i); err != nil {
			b.Fatal(err)
		}
		return seen.Wait(b, i).Sub(start)
	}
}

// BenchmarkDiscoveryCacheMemory reports the heap a Discovery holds per
// cached instance, with 10,000 instances of one service.
func BenchmarkDiscoveryCacheMemory(b *testing.B) {
	const n = 10000
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	ctx := context.Background()
	registrytest.PutMemoryFixture(b, cli, "big", n)
	var perInstance float64
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		d, err := etcd.NewDiscovery(cli, etcd.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		w, err := d.Watch(ctx, "big")
		if err != nil {
			b.Fatal(err)
		}
		for s := w.Snapshot(); len(s.Instances) != n; s = w.Snapshot() {
			<-w.Updates()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perInstance = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(w)
		_ = d.Close()
	}
	b.ReportMetric(perInstance, "heap-B/instance")
	b.ReportMetric(0, "ns/op")
}
