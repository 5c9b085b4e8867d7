package scale_test

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

// changes is how many one-instance changes the change benchmark times.
const changes = 100

// BenchmarkLargeRegistry loads a large registry, 100,000 instances over
// 1,000 services and 20,000 instances in one service, three ways in each
// iteration, each from the same live heap:
//
//   - get: one Get of the whole prefix, each value kept as its bytes in a
//     map by key (the floor: what holding the raw registry costs);
//   - decode: the same Get, each value decoded (registry.Unmarshal) into a
//     map of instances by key (what a plain client-side cache holds);
//   - muster: a registry/etcd Discovery watching every service (one watch
//     each), until every watcher's snapshot has all its instances.
//
// It reports the time to load and the heap per instance of each (the live
// heap after two forced collections, minus the same before the load; etcd
// runs in a child process, so that heap is the client's alone), then, with
// the Discovery still watching everything, the time for one new instance
// to reach a watcher of the first service, against a raw etcd watch of the
// same prefix seeing the same Put, over 100 changes. Run with -benchtime 1x
// -count 3: each run starts its own server.
func BenchmarkLargeRegistry(b *testing.B) {
	for _, sc := range []struct{ services, per int }{{1000, 100}, {1, 20000}} {
		b.Run(fmt.Sprintf("%dx%d", sc.services, sc.per), func(b *testing.B) { benchLarge(b, sc.services, sc.per) })
	}
}

func benchLarge(b *testing.B, nServices, per int) {
	c := etcdtest.Start(b, etcdtest.WithProcesses())
	cli := c.Client(b, c.DirectEndpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		b.Fatal(err)
	}
	services := serviceNames(nServices)
	total := nServices * per
	bytes, _ := fill(b, cli, services, per, func(int) clientv3.LeaseID { return lease.ID })
	// A first read, unmeasured, so that no contender pays for a cold server.
	if _, err := cli.Get(ctx, registry.DefaultPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		b.Fatal(err)
	}

	figures := map[string][]float64{}
	add := func(name string, v float64) { figures[name] = append(figures[name], v) }
	for range b.N {
		for _, decode := range []bool{false, true} {
			name := "get"
			if decode {
				name = "decode"
			}
			took, heap := loadRaw(ctx, b, cli, total, decode)
			add(name+"-ms", ms(took))
			add(name+"-B/inst", heap)
		}
		l := loadDiscovery(ctx, b, cli, services, per, lease.ID)
		add("muster-ms", ms(l.took))
		add("muster-B/inst", l.heap)
		add("muster-stack-B/service", l.stack)
		add("muster-goroutines/service", l.goroutines)
		add("change-p50-µs", registrytest.Micros(registrytest.Percentile(l.change, 0.5)))
		add("floor-p50-µs", registrytest.Micros(registrytest.Percentile(l.floor, 0.5)))
		add("change-p99-µs", registrytest.Micros(registrytest.Percentile(l.change, 0.99)))
		add("floor-p99-µs", registrytest.Micros(registrytest.Percentile(l.floor, 0.99)))
		b.Logf("%d instances over %d services: load get %.0f ms, decode %.0f ms, muster %.0f ms; heap per instance get %.0f B, decode %.0f B, muster %.0f B (values %d B); change p50 muster %.0f µs, floor %.0f µs",
			total, nServices, last(figures["get-ms"]), last(figures["decode-ms"]), last(figures["muster-ms"]),
			last(figures["get-B/inst"]), last(figures["decode-B/inst"]), last(figures["muster-B/inst"]), bytes/total,
			last(figures["change-p50-µs"]), last(figures["floor-p50-µs"]))
	}
	m := map[string]float64{}
	for name, xs := range figures {
		m[name] = median(xs)
		b.ReportMetric(m[name], name)
	}
	b.ReportMetric(float64(bytes)/float64(total), "value-B/inst")
	b.ReportMetric(m["muster-ms"]/m["get-ms"], "muster/get-time")
	b.ReportMetric(m["muster-B/inst"]/m["get-B/inst"], "muster/get-heap")
	b.ReportMetric(m["muster-B/inst"]/m["decode-B/inst"], "muster/decode-heap")
	b.ReportMetric(m["change-p50-µs"]/m["floor-p50-µs"], "change/floor-p50")
	b.ReportMetric(0, "ns/op")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func last(xs []float64) float64 { return xs[len(xs)-1] }

// loadRaw reads the whole registry with one Get into a map by key, of the
// values' bytes or (decode) of decoded instances, and returns how long
// that took and the heap the map holds per instance.
func loadRaw(ctx context.Context, b *testing.B, cli *clientv3.Client, total int, decode bool) (time.Duration, float64) {
	base := measure()
	start := time.Now()
	resp, err := cli.Get(ctx, registry.DefaultPrefix+"/", clientv3.WithPrefix())
	if err != nil {
		b.Fatal(err)
	}
	var held any
	n := len(resp.Kvs)
	if decode {
		m := make(map[string]*registry.Instance, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			in, err := registry.Unmarshal(kv.Value)
			if err != nil {
				b.Fatalf("decode %s: %v", kv.Key, err)
			}
			m[string(kv.Key)] = &in
		}
		held = m
	} else {
		m := make(map[string][]byte, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			m[string(kv.Key)] = kv.Value
		}
		held = m
	}
	took := time.Since(start)
	resp = nil
	after := measure()
	runtime.KeepAlive(held)
	if n != total {
		b.Fatalf("Get found %d keys, want %d", n, total)
	}
	return took, after.perItem(base, total)
}

// discoveryLoad is what loadDiscovery measured.
type discoveryLoad struct {
	took              time.Duration
	heap              float64 // per instance
	stack, goroutines float64 // per service
	change, floor     []time.Duration
}

// loadDiscovery starts a Discovery, watches every service and waits until
// each watcher has per instances; then it times changes to the first
// service (see timeChanges) and closes everything.
func loadDiscovery(ctx context.Context, b *testing.B, cli *clientv3.Client, services []string, per int, lease clientv3.LeaseID) discoveryLoad {
	base := measure()
	start := time.Now()
	d, err := etcd.NewDiscovery(cli, etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	ws := make([]registry.Watcher, len(services))
	for i, svc := range services {
		if ws[i], err = d.Watch(ctx, svc); err != nil {
			b.Fatal(err)
		}
	}
	for i, w := range ws {
		waitSize(b, w, per, 2*time.Minute, services[i])
	}
	var l discoveryLoad
	l.took = time.Since(start)
	after := measure()
	l.heap = after.perItem(base, len(services)*per)
	l.stack = (float64(after.stack) - float64(base.stack)) / float64(len(services))
	l.goroutines = float64(after.goroutines-base.goroutines) / float64(len(services))
	l.change, l.floor = timeChanges(ctx, b, cli, ws[0], services[0], per, lease)
	for _, w := range ws {
		_ = w.Close()
	}
	return l
}

// waitSize waits until w's snapshot is loaded with n instances.
func waitSize(b *testing.B, w registry.Watcher, n int, timeout time.Duration, svc string) {
	deadline := time.After(timeout)
	for s := w.Snapshot(); !s.Loaded || len(s.Instances) != n; s = w.Snapshot() {
		select {
		case <-w.Updates():
		case <-deadline:
			b.Fatalf("service %s: %d instances (loaded %v) after %v, want %d", svc, len(s.Instances), s.Loaded, timeout, n)
		}
	}
}

// timeChanges adds new instances to svc (which has per instances) one at
// a time, and returns for each the time from its Put to the first snapshot
// of w that has it, and to the event on a raw watch of the service's
// prefix (the floor). It deletes them again before it returns.
func timeChanges(ctx context.Context, b *testing.B, cli *clientv3.Client, w registry.Watcher, svc string, per int, lease clientv3.LeaseID) (change, floor []time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	prefix := registry.ServicePrefix(registry.DefaultPrefix, svc)
	raw, seen := registrytest.NewArrivals(), registrytest.NewArrivals()
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		b.Fatalf("raw watch of %s not created: %v", prefix, resp.Err())
	}
	rawDone, seenDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(rawDone)
		n := 0
		for resp := range wch {
			for range resp.Events {
				raw.Mark(n, time.Now())
				n++
			}
		}
	}()
	go func() {
		defer close(seenDone)
		for {
			select {
			case <-w.Updates():
				// Instances are only added: a snapshot of per+n+1 is the
				// arrival of change n.
				if n := len(w.Snapshot().Instances) - per; n > 0 {
					seen.Mark(n-1, time.Now())
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-rawDone
		<-seenDone
		if _, err := cli.Delete(context.Background(), prefix+"change-", clientv3.WithPrefix()); err != nil {
			b.Errorf("delete the changes: %v", err)
		}
	}()
	for i := range changes {
		in := instance(svc, i)
		in.ID = fmt.Sprintf("change-%04d", i)
		in.Addr = fmt.Sprintf("192.168.%d.%d:9000", i/250, i%250)
		val, err := registry.Marshal(in)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := cli.Put(ctx, registry.Key(registry.DefaultPrefix, svc, in.ID), string(val), clientv3.WithLease(lease)); err != nil {
			b.Fatal(err)
		}
		floor = append(floor, raw.Wait(b, i).Sub(start))
		change = append(change, seen.Wait(b, i).Sub(start))
	}
	return change, floor
}
