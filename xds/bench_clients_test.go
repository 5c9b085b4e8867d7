package xds_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/internal/greeterpb"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
	"github.com/musterhq/muster/xds"
)

// BenchmarkClientConvergence measures, on the same registrations, the time
// from Registrar.Register to the first call a client makes to the new
// instance, for real clients side by side: a muster:///greeter channel on
// Muster's resolver (round_robin), the in-process grpc-go xDS client, the
// Node client (newest @grpc/grpc-js-xds) and the Python client (Debian's
// grpcio), the last three through one control plane. Every client calls in
// a loop (1 ms between calls), so each figure also holds the wait for the
// client's next call and its connection to the new backend, the same for
// all. Two backends take turns: each iteration registers the one that is
// not registered, waits until every client has called it, then
// deregisters the other and waits until every client has made 20 calls
// in a row elsewhere. Run with -benchtime 100x.
func BenchmarkClientConvergence(b *testing.B) {
	reg, newDisc := benchRegistry(b)
	_, addr := serveBench(b, newDisc(), xds.WithServices("greeter"))
	backends := [2]*greeterBackend{startGreeter(b), startGreeter(b)}
	ctx := context.Background()
	register := func(i int) string {
		id := fmt.Sprintf("%06d", i)
		if err := reg.Register(ctx, registry.Instance{Name: "greeter", ID: id, Addr: backends[i%2].Addr}); err != nil {
			b.Fatal(err)
		}
		return id
	}
	prev := register(0)

	boot := bootstrap(addr, "bench", "")
	muster := newTracker("muster")
	goCalls(b, ctx, muster, grpc.WithResolvers(resolver.NewBuilder(newDisc(), resolver.WithLogger(quiet), resolver.WithBalancer(""))), "muster:///greeter")
	goXDS := newTracker("go-xds")
	xb, err := xdsResolverFor(boot)
	if err != nil {
		b.Fatal(err)
	}
	goCalls(b, ctx, goXDS, grpc.WithResolvers(xb), "xds:///greeter")
	trackers := []*tracker{muster, goXDS}
	for _, ch := range []struct {
		name  string
		start func(t testing.TB, boot string, every time.Duration, md []string) *childClient
	}{{"node-xds", nodeClient(nodeClientDir)}, {"python-xds", pythonClient}} {
		tr := newTracker(ch.name)
		cl := ch.start(b, boot, time.Millisecond, nil)
		go func() {
			for call := range cl.calls {
				if call.OK {
					tr.record(call.By, time.Now())
				}
			}
		}()
		trackers = append(trackers, tr)
	}
	for _, tr := range trackers {
		tr.waitFor(b, backends[0].Addr, time.Time{})
	}

	lat := make([][]time.Duration, len(trackers))
	var regLat []time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		target, old := backends[i%2].Addr, backends[(i+1)%2].Addr
		start := time.Now()
		id := register(i)
		regLat = append(regLat, time.Since(start))
		for k, tr := range trackers {
			lat[k] = append(lat[k], tr.waitFor(b, target, start).Sub(start))
		}
		b.StopTimer()
		if err := reg.Deregister(ctx, "greeter", prev); err != nil {
			b.Fatal(err)
		}
		for _, tr := range trackers {
			tr.waitAway(b, old, 20)
		}
		prev = id
		b.StartTimer()
	}
	b.StopTimer()
	m50 := registrytest.Percentile(lat[0], 0.5)
	b.ReportMetric(registrytest.Micros(registrytest.Percentile(regLat, 0.5)), "register-p50-µs")
	for k, tr := range trackers {
		p50 := registrytest.Percentile(lat[k], 0.5)
		b.ReportMetric(registrytest.Micros(p50), tr.name+"-p50-µs")
		b.ReportMetric(registrytest.Micros(registrytest.Percentile(lat[k], 0.99)), tr.name+"-p99-µs")
		if k > 0 {
			b.ReportMetric(float64(p50)/float64(m50), tr.name+"/muster-p50")
		}
	}
	b.ReportMetric(0, "ns/op")
}

// tracker follows one client's calls: when each backend was first called
// after a point, and how many calls were made since each backend's last.
type tracker struct {
	name  string
	mu    sync.Mutex
	calls []timedCall
	wake  chan struct{} // closed and replaced on each call
}

type timedCall struct {
	at time.Time
	by string
}

func newTracker(name string) *tracker { return &tracker{name: name, wake: make(chan struct{})} }

func (tr *tracker) record(by string, at time.Time) {
	tr.mu.Lock()
	tr.calls = append(tr.calls, timedCall{at, by})
	close(tr.wake)
	tr.wake = make(chan struct{})
	tr.mu.Unlock()
}

// waitFor returns when addr was first called at or after since, waiting
// for it (30 s at most).
func (tr *tracker) waitFor(b *testing.B, addr string, since time.Time) time.Time {
	return tr.wait(b, "calling "+addr, func(calls []timedCall) (first time.Time, ok bool) {
		for i := len(calls) - 1; i >= 0 && !calls[i].at.Before(since); i-- {
			if calls[i].by == addr {
				first, ok = calls[i].at, true
			}
		}
		return first, ok
	})
}

// waitAway returns once n calls in a row went elsewhere than addr.
func (tr *tracker) waitAway(b *testing.B, addr string, n int) {
	tr.wait(b, fmt.Sprintf("making %d calls in a row not to %s", n, addr), func(calls []timedCall) (time.Time, bool) {
		if len(calls) < n {
			return time.Time{}, false
		}
		for _, c := range calls[len(calls)-n:] {
			if c.by == addr || c.by == "" {
				return time.Time{}, false
			}
		}
		return time.Time{}, true
	})
}

func (tr *tracker) wait(b *testing.B, what string, cond func([]timedCall) (time.Time, bool)) time.Time {
	timeout := time.After(30 * time.Second)
	for {
		tr.mu.Lock()
		at, ok := cond(tr.calls)
		wake := tr.wake
		if len(tr.calls) > 4096 { // keep the tail only
			tr.calls = append(tr.calls[:0:0], tr.calls[len(tr.calls)-1024:]...)
		}
		tr.mu.Unlock()
		if ok {
			return at
		}
		select {
		case <-wake:
		case <-timeout:
			b.Fatalf("%s: after 30 s, still not %s", tr.name, what)
		}
	}
}

// goCalls makes calls in a loop on a channel to target, recording each in
// tr, until b's end.
func goCalls(b *testing.B, ctx context.Context, tr *tracker, opt grpc.DialOption, target string) {
	conn, err := grpc.NewClient(target, opt, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gc := greeterpb.NewGreeterClient(conn)
		for ctx.Err() == nil {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			reply, err := gc.SayHello(cctx, &greeterpb.HelloRequest{Name: "bench"})
			ccancel()
			if err == nil {
				tr.record(reply.GetServedBy(), time.Now())
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
	}()
	b.Cleanup(func() {
		cancel()
		<-done
		_ = conn.Close()
	})
}
