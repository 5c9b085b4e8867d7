package xds

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/musterhq/muster/registry"
)

// BenchmarkPublishChange measures the control plane's own work for one
// change of a service of n instances, as the pipeline hands it over (a
// new list in which one instance changed and the others are the instances
// of the last list, the same pointers): from the feed's publish to the
// assignment set in the endpoint cache of one client zone. What follows (go-control-plane marshalling the response,
// the stream) is not in it.
func BenchmarkPublishChange(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			o := defaultOptions()
			s := &Server{c: newCaches("bench-", 64, false, false, log), stats: newStats(&o), log: log}
			s.c.endpointsFor(locality{}) // one client zone
			f := &feed{s: s, service: "greeter", policy: RoundRobin, logged: map[skipped]bool{}}
			list := make([]*registry.Instance, n)
			for i := range list {
				list[i] = &registry.Instance{Name: "greeter", ID: fmt.Sprintf("%06d", i),
					Addr: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1), Zone: fmt.Sprintf("z%d", i%3),
					Version: "v1.4.2", Weight: 100, Metadata: map[string]string{"tier": "web"}}
			}
			if err := f.publish(list, registry.Canary{}, registry.Policy{}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := i % n
				in := *list[k]
				in.Weight = 100 + i%2
				list[k] = &in
				if err := f.publish(list, registry.Canary{}, registry.Policy{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
