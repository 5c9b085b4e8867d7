package etcd_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/etcdtest"
	"github.com/musterhq/muster/internal/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// BenchmarkConvergence measures how long a new registration takes to reach a
// watcher: the floor (a raw etcd Put seen by a raw Watch) and Muster
// (Registrar.Register seen in a Discovery snapshot), on the same embedded
// server. Run with -benchtime 300x or more for stable percentiles.
func BenchmarkConvergence(b *testing.B) {
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)

	b.Run("floor=raw-put-watch", func(b *testing.B) { registrytest.BenchRawPutWatch(b, cli) })

	b.Run("muster=raw-put-discovery", func(b *testing.B) {
		benchDiscovery(b, cli, func(ctx context.Context, prefix string, i int) error {
			in := instance("svc", fmt.Sprintf("i%d", i), 9000)
			val, _ := registry.Marshal(in)
			_, err := cli.Put(ctx, registry.Key(prefix, in.Name, in.ID), string(val))
			return err
		})
	})
	b.Run("muster=register-discovery", func(b *testing.B) {
		var r *etcd.Registrar
		benchDiscovery(b, cli, func(ctx context.Context, prefix string, i int) error {
			if r == nil {
				var err error
				if r, err = etcd.NewRegistrar(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet)); err != nil {
					return err
				}
				b.Cleanup(func() { _ = r.Close() })
			}
			return r.Register(ctx, instance("svc", fmt.Sprintf("i%d", i), 9000))
		})
	})
}

// benchDiscovery times add(i) until a Discovery snapshot holds instance i.
func benchDiscovery(b *testing.B, cli *clientv3.Client, add func(ctx context.Context, prefix string, i int) error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefix := fmt.Sprintf("/bench-%s-%d", b.Name(), time.Now().UnixNano())
	d, err := etcd.NewDiscovery(cli, etcd.WithPrefix(prefix), etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
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
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := add(ctx, prefix, i); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, seen.Wait(b, i).Sub(start))
	}
	b.StopTimer()
	registrytest.ReportPercentiles(b, lat)
	_ = w.Close()
	<-done
}

// BenchmarkDiscoveryCacheMemory reports the heap a Discovery holds per
// cached instance, with 10,000 instances of one service.
func BenchmarkDiscoveryCacheMemory(b *testing.B) {
	const n = 10000
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	ctx := context.Background()
	ops := make([]clientv3.Op, 0, 100)
	for i := 0; i < n; i++ {
		in := registry.Instance{
			Name: "big", ID: fmt.Sprintf("instance-%05d", i), Addr: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250),
			Version: "v1.4.2", Zone: fmt.Sprintf("eu-1%c", 'a'+i%3), Metadata: map[string]string{"color": "blue"},
			RegisteredAt: time.Now(),
		}
		val, err := registry.Marshal(in)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(registry.Key(registry.DefaultPrefix, in.Name, in.ID), string(val)))
		if len(ops) == cap(ops) {
			if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				b.Fatal(err)
			}
			ops = ops[:0]
		}
	}
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
