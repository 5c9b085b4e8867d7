package scale_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// maxTxnOps is etcd's default limit of operations in one transaction.
const maxTxnOps = 128

// instance returns instance i of service svc, shaped like a real one: ID,
// address, version, zone, one metadata pair, registration time.
func instance(svc string, i int) registry.Instance {
	return registry.Instance{
		Name: svc, ID: fmt.Sprintf("instance-%06d", i),
		Addr:    fmt.Sprintf("10.%d.%d.%d:8080", i/62500, i/250%250, i%250),
		Version: "v1.4.2", Zone: fmt.Sprintf("eu-1%c", 'a'+i%3),
		Metadata:     map[string]string{"color": "blue"},
		RegisteredAt: time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC),
	}
}

// serviceNames returns n service names, svc-0000 onwards.
func serviceNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("svc-%04d", i)
	}
	return names
}

// fill writes perService instances of every service under the default
// prefix with raw Puts, in transactions of at most maxTxnOps operations;
// the k-th key written (k counts over all services) is bound to lease(k).
// It returns the bytes of keys and values written and the revision of the
// last write.
func fill(tb testing.TB, cli *clientv3.Client, services []string, perService int, lease func(k int) clientv3.LeaseID) (bytes int, rev int64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ops := make([]clientv3.Op, 0, maxTxnOps)
	flush := func() {
		resp, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			tb.Fatalf("write %d keys: %v", len(ops), err)
		}
		rev = resp.Header.Revision
		ops = ops[:0]
	}
	k := 0
	for _, svc := range services {
		for i := range perService {
			in := instance(svc, i)
			val, err := registry.Marshal(in)
			if err != nil {
				tb.Fatal(err)
			}
			key := registry.Key(registry.DefaultPrefix, svc, in.ID)
			bytes += len(key) + len(val)
			ops = append(ops, clientv3.OpPut(key, string(val), clientv3.WithLease(lease(k))))
			k++
			if len(ops) == maxTxnOps {
				flush()
			}
		}
	}
	if len(ops) > 0 {
		flush()
	}
	return bytes, rev
}

// memory is the process's live memory at one moment.
type memory struct {
	heap, stack uint64
	goroutines  int
}

// measure returns the live heap after two forced collections (the second
// frees what finalizers of the first released), the stack memory in use
// and the goroutine count.
func measure() memory {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memory{heap: m.HeapAlloc, stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// perItem returns the heap grown from base to m, per item.
func (m memory) perItem(base memory, items int) float64 {
	return (float64(m.heap) - float64(base.heap)) / float64(items)
}

// median returns the median of xs, which it sorts in place.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}
