package etcd

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

// BenchmarkWatchEventToSnapshot measures a service's work for one watch
// event in a service of n instances, without etcd: decoding the value,
// updating the cache and publishing the next sorted snapshot. Events
// alternately add and delete one instance.
func BenchmarkWatchEventToSnapshot(b *testing.B) {
	for _, n := range []int{150, 1000, 10000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			o := buildOptions([]DiscoveryOption{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
			d := &Discovery{opts: o, log: o.logger}
			s := &service{d: d, name: "svc", prefix: registry.ServicePrefix(o.prefix, "svc"), log: d.log,
				hub: watchhub.New("svc", nil), cache: newCache(o.prefix, "svc", nil)}
			put := func(i int) *clientv3.Event {
				in := registry.Instance{Name: "svc", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i%40000)}
				v, err := registry.Marshal(in)
				if err != nil {
					b.Fatal(err)
				}
				return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(registry.Key(o.prefix, "svc", in.ID)), Value: v}}
			}
			for i := range n {
				s.cache.apply(put(i), nil)
			}
			s.publish(1)
			add := put(n)
			del := &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: add.Kv.Key}}
			for i := 0; b.Loop(); i++ {
				ev := add
				if i%2 == 1 {
					ev = del
				}
				s.skipped(s.cache.apply(ev, nil))
				s.publish(int64(2 + i))
			}
		})
	}
}
