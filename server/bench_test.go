package server_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/resolvertest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
	"github.com/musterhq/muster/server"
)

// channelState tracks the endpoint count of one channel.
type channelState struct {
	mu      sync.Mutex
	n       int
	changed chan struct{}
	at      time.Time
}

func (c *channelState) update(n int, at time.Time) {
	c.mu.Lock()
	c.n, c.at = n, at
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// waitN waits until the channel holds n endpoints and returns when it got
// that state.
func (c *channelState) waitN(b *testing.B, n int) time.Time {
	timeout := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		got, at := c.n, c.at
		c.mu.Unlock()
		if got == n {
			return at
		}
		select {
		case <-c.changed:
		case <-timeout:
			b.Fatalf("channel holds %d endpoints, want %d", got, n)
		}
	}
}

// BenchmarkDeregistrationReachesClients measures, per sample, the time from
// Deregister to the moment the last of 10 client channels (each its own
// Discovery, as in separate processes) has a state without the instance:
// what the default drain delay must exceed. Each sample re-registers the
// instance first. Run with -benchtime 100x or more.
func BenchmarkDeregistrationReachesClients(b *testing.B) {
	const clients = 10
	c := etcdtest.Start(b)
	cli := c.Client(b, c.DirectEndpoints()...)
	reg, err := etcd.NewRegistrar(cli, etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	stay := registry.Instance{Name: "greeter", ID: "stay", Addr: "127.0.0.1:1"}
	leave := registry.Instance{Name: "greeter", ID: "leave", Addr: "127.0.0.1:2"}
	ctx := context.Background()
	if err := reg.Register(ctx, stay); err != nil {
		b.Fatal(err)
	}
	states := make([]*channelState, clients)
	for i := range states {
		states[i] = &channelState{changed: make(chan struct{}, 1)}
		disc, err := etcd.NewDiscovery(c.Client(b, c.DirectEndpoints()...), etcd.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		defer disc.Close()
		bld := resolvertest.RecordingBuilder{Builder: resolver.NewBuilder(disc, resolver.WithLogger(quiet)), OnUpdate: states[i].update}
		conn, err := grpc.NewClient("muster:///greeter", grpc.WithResolvers(bld),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		conn.Connect()
	}
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		if err := reg.Register(ctx, leave); err != nil {
			b.Fatal(err)
		}
		for _, s := range states {
			s.waitN(b, 2)
		}
		start := time.Now()
		if err := reg.Deregister(ctx, leave.Name, leave.ID); err != nil {
			b.Fatal(err)
		}
		var last time.Duration
		for _, s := range states {
			last = max(last, s.waitN(b, 1).Sub(start))
		}
		lat = append(lat, last)
	}
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	b.ReportMetric(float64(p(0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(p(0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(server.DefaultDrainDelay)/float64(p(0.99)), "drain-delay/p99")
	b.ReportMetric(0, "ns/op")
}
