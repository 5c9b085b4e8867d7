package resolver

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
)

type fixedWatcher struct{ snap registry.Snapshot }

func (w *fixedWatcher) Updates() <-chan struct{}    { return nil }
func (w *fixedWatcher) Snapshot() registry.Snapshot { return w.snap }
func (w *fixedWatcher) Close() error                { return nil }

type discardCC struct{ grpcresolver.ClientConn }

func (discardCC) UpdateState(grpcresolver.State) error { return nil }

// BenchmarkResolverUpdate measures a resolver's work for one snapshot of a
// service of n instances that differs from the previous one by one
// instance (alternately added and removed): protection, filters, endpoint
// reuse and the state handed to the channel (here one that discards it).
func BenchmarkResolverUpdate(b *testing.B) {
	for _, n := range []int{150, 1000, 10000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			all := make([]*registry.Instance, n+1)
			for i := range all {
				all[i] = &registry.Instance{Name: "svc", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i%40000), Weight: 100}
			}
			w := &fixedWatcher{}
			bld := NewBuilder(nil, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			r := &musterResolver{b: bld, cc: discardCC{}, w: w, log: bld.log,
				protect: protector{fraction: bld.opts.protectFraction, window: bld.opts.protectWindow}}
			for i := 0; b.Loop(); i++ {
				w.snap = registry.Snapshot{Loaded: true, Revision: int64(i + 1), Instances: all[:n+i%2]}
				r.update(time.Now())
			}
		})
	}
}
