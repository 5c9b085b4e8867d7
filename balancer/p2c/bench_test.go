package p2c

import (
	"testing"
	"time"

	"google.golang.org/grpc/balancer"

	"github.com/musterhq/muster/balancer/internal/lb"
)

// BenchmarkPickDone measures Pick followed by Done (a success) on a
// picker over five endpoints with fake pick_first children; see
// bench/balancer for the comparison with grpc-go's pickers over real
// connections.
func BenchmarkPickDone(b *testing.B) {
	det := new(lb.Detector)
	det.SetConfig(lb.DefaultOutlierConfig())
	var eps []testEndpoint
	for _, a := range []string{"a", "b", "c", "d", "e"} {
		eps = append(eps, testEndpoint{addr: a, cost: time.Millisecond})
	}
	p := newTestPicker(&fakeClock{t: nanotime()}, det, eps...)
	p.sampler = new(sampler) // adaptive, as in a balancer
	b.Run("single", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			res, _ := p.Pick(balancer.PickInfo{})
			res.Done(ok)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				res, _ := p.Pick(balancer.PickInfo{})
				res.Done(ok)
			}
		})
	})
}
