package registrytest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// Arrivals records the first time each numbered item (an instance, an
// endpoint count) was seen, for latency benchmarks: the benchmark notes the
// start, makes a change, and waits for its number.
type Arrivals struct {
	mu   sync.Mutex
	seen map[int]time.Time
	ch   chan struct{}
}

// NewArrivals returns an empty recorder.
func NewArrivals() *Arrivals {
	return &Arrivals{seen: map[int]time.Time{}, ch: make(chan struct{}, 1)}
}

// Mark records that item i was seen at at, unless it was seen before. It
// is safe to call from any goroutine.
func (a *Arrivals) Mark(i int, at time.Time) {
	a.mu.Lock()
	if _, ok := a.seen[i]; !ok {
		a.seen[i] = at
	}
	a.mu.Unlock()
	select {
	case a.ch <- struct{}{}:
	default:
	}
}

// Wait returns when item i was first seen, failing b if it is not seen
// within 10s.
func (a *Arrivals) Wait(b testing.TB, i int) time.Time {
	timeout := time.After(10 * time.Second)
	for {
		a.mu.Lock()
		at, ok := a.seen[i]
		a.mu.Unlock()
		if ok {
			return at
		}
		select {
		case <-a.ch:
		case <-timeout:
			b.Fatalf("item %d not seen within 10s", i)
		}
	}
}

// ReportPercentiles reports the p50 and p99 of lat (sorted in place) in
// microseconds, and zeroes ns/op, which for these benchmarks measures the
// setup rather than the result.
func ReportPercentiles(b *testing.B, lat []time.Duration) {
	b.ReportMetric(Micros(Percentile(lat, 0.50)), "p50-µs")
	b.ReportMetric(Micros(Percentile(lat, 0.99)), "p99-µs")
	b.ReportMetric(0, "ns/op")
}

// Percentile returns the p-quantile (0..1) of lat, which it sorts in
// place.
func Percentile(lat []time.Duration, p float64) time.Duration {
	slices.Sort(lat)
	return lat[int(p*float64(len(lat)-1))]
}

// Micros returns d in whole microseconds, as benchmarks report it.
func Micros(d time.Duration) float64 { return float64(d.Microseconds()) }

// RawPutWatch is the floor of the convergence benchmarks: the time from a
// raw etcd Put of an instance value (with a lease, as a registrar writes
// it) to the event on a raw Watch of the same client.
type RawPutWatch struct {
	cli    *clientv3.Client
	prefix string
	lease  clientv3.LeaseID
	val    string
	seen   *Arrivals
}

// NewRawPutWatch opens the watch and grants the lease; both end with tb.
func NewRawPutWatch(tb testing.TB, cli *clientv3.Client) *RawPutWatch {
	ctx, cancel := context.WithCancel(context.Background())
	f := &RawPutWatch{cli: cli, prefix: fmt.Sprintf("/floor-%d/", time.Now().UnixNano()), seen: NewArrivals()}
	wch := cli.Watch(ctx, f.prefix, clientv3.WithPrefix())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n := 0
		for resp := range wch {
			n += len(resp.Events)
			f.seen.Mark(n, time.Now())
		}
	}()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		tb.Fatal(err)
	}
	f.lease = lease.ID
	val, err := registry.Marshal(registry.Instance{Name: "floor", ID: "x", Addr: "127.0.0.1:9000"})
	if err != nil {
		tb.Fatal(err)
	}
	f.val = string(val)
	return f
}

// Once puts key i (the i-th call, from 0) and returns how long its event
// took to arrive.
func (f *RawPutWatch) Once(tb testing.TB, i int) time.Duration {
	start := time.Now()
	if _, err := f.cli.Put(context.Background(), fmt.Sprintf("%s%d", f.prefix, i), f.val, clientv3.WithLease(f.lease)); err != nil {
		tb.Fatal(err)
	}
	return f.seen.Wait(tb, i+1).Sub(start)
}

// Path is one way for a change to reach its watcher, for SideBySide.
type Path struct {
	// Name labels the path's metrics.
	Name string
	// Once makes the i-th change (from 0) and returns how long it took to
	// arrive.
	Once func(i int) time.Duration
}

// SideBySide runs b.N iterations in which every path makes one change,
// in an order that rotates with the iteration, so that all paths are
// measured under the same conditions. It reports each path's p50 and p99
// (as <name>-p50-µs, <name>-p99-µs) and returns the p50s by name.
func SideBySide(b *testing.B, paths ...Path) map[string]time.Duration {
	lat := make([][]time.Duration, len(paths))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range paths {
			j := (i + k) % len(paths)
			lat[j] = append(lat[j], paths[j].Once(i))
		}
	}
	b.StopTimer()
	p50 := make(map[string]time.Duration, len(paths))
	for j, p := range paths {
		p50[p.Name] = Percentile(lat[j], 0.50)
		b.ReportMetric(Micros(p50[p.Name]), p.Name+"-p50-µs")
		b.ReportMetric(Micros(Percentile(lat[j], 0.99)), p.Name+"-p99-µs")
	}
	b.ReportMetric(0, "ns/op")
	return p50
}

// PutMemoryFixture writes n instances of service under the default prefix
// with raw Puts (100 to a Txn, no lease), each with an ID, an address, a
// version, a zone, one metadata pair and a registration time: the
// instances of the cache memory benchmarks.
func PutMemoryFixture(tb testing.TB, cli *clientv3.Client, service string, n int) {
	tb.Helper()
	ops := make([]clientv3.Op, 0, 100)
	flush := func() {
		if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
			tb.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := range n {
		in := registry.Instance{
			Name: service, ID: fmt.Sprintf("instance-%05d", i), Addr: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250),
			Version: "v1.4.2", Zone: fmt.Sprintf("eu-1%c", 'a'+i%3), Metadata: map[string]string{"color": "blue"},
			RegisteredAt: time.Now(),
		}
		val, err := registry.Marshal(in)
		if err != nil {
			tb.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(registry.Key(registry.DefaultPrefix, in.Name, in.ID), string(val)))
		if len(ops) == cap(ops) {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
}
