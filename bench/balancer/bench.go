package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	_ "google.golang.org/grpc/balancer/leastrequest" // registers least_request_experimental
	"google.golang.org/grpc/balancer/roundrobin"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/musterhq/muster/balancer/p2c"
	"github.com/musterhq/muster/balancer/wrr"
	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

const leastRequest = "least_request_experimental"

// policies are the contenders, in the order they are reported.
var policies = []string{p2c.Name, wrr.Name, roundrobin.Name, leastRequest}

// cluster is a set of loopback backends, the first of which can be slowed.
// The last blue of them are blue instances (metadata color=blue), given
// to the channel by a manual resolver; with blue 0 the channel resolves
// direct:/// targets, as any resolver without instances would.
type cluster struct {
	backends []*backend
	blue     int
	// local puts the first three backends in the client's zone z1 and
	// the others in z2, and gives the channel that locality.
	local bool
}

func startCluster(n int) (*cluster, error) {
	c := &cluster{}
	for range n {
		b, err := startBackend()
		if err != nil {
			c.stop()
			return nil, err
		}
		c.backends = append(c.backends, b)
	}
	return c, nil
}

func (c *cluster) stop() {
	for _, b := range c.backends {
		b.stop()
	}
}

// failing makes every call to the first backend fail, or stops it.
func (c *cluster) failing(on bool) { c.backends[0].fail.Store(on) }

// slow sets the delay of the first backend.
func (c *cluster) slow(d time.Duration) { c.backends[0].delay.Store(int64(d)) }

func (c *cluster) target() string {
	addrs := make([]string, len(c.backends))
	for i, b := range c.backends {
		addrs[i] = b.addr
	}
	return "direct:///" + strings.Join(addrs, ",")
}

// dial opens a channel to the cluster with the policy (through its
// capture when captured), and makes calls until every backend served one,
// so that every connection is up.
// The policy may carry its JSON config after a colon:
// `muster_p2c:{"decayTime":"1s"}`.
func (c *cluster) dial(policy string, captured bool) (*grpc.ClientConn, error) {
	policy, config, _ := strings.Cut(policy, ":")
	if config == "" {
		config = "{}"
	}
	name := policy
	if captured {
		name = captures[policy].Name()
	}
	target, res := c.target(), grpcresolver.Builder(resolver.NewDirectBuilder())
	if c.blue > 0 || c.local {
		target, res = "bench:///colored", c.coloredResolver()
	}
	conn, err := grpc.NewClient(target,
		grpc.WithResolvers(res),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig":[{%q:%s}]}`, name, config)), grpc.WithDisableServiceConfig())
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	blue := color.WithColor(context.Background(), "blue")
	want := len(c.backends)
	if c.local {
		want = 3 // the client's zone takes every call while healthy
	}
	for i := 0; len(seen) < want; i++ {
		if time.Now().After(deadline) {
			conn.Close()
			return nil, fmt.Errorf("%s: after 10s only %d of %d backends served a call", policy, len(seen), len(c.backends))
		}
		parent := context.Background()
		if i%2 == 1 { // blue backends take only blue calls
			parent = blue
		}
		ctx, cancel := context.WithTimeout(parent, 5*time.Second)
		addr, err := call(ctx, conn)
		cancel()
		if err == nil {
			seen[addr] = true
		}
	}
	return conn, nil
}

// coloredResolver resolves to the cluster's backends as Muster instances,
// the last c.blue of them blue.
func (c *cluster) coloredResolver() grpcresolver.Builder {
	eps := make([]grpcresolver.Endpoint, len(c.backends))
	for i, b := range c.backends {
		in := registry.Instance{Name: "bench", ID: fmt.Sprint(i), Addr: b.addr, Weight: registry.DefaultWeight}
		if i >= len(c.backends)-c.blue {
			in.Metadata = map[string]string{"color": "blue"}
		}
		if c.local {
			in.Zone = "z1"
			if i >= 3 {
				in.Zone = "z2"
			}
		}
		eps[i] = resolver.EndpointOf(in)
	}
	r := manual.NewBuilderWithScheme("bench")
	st := grpcresolver.State{Endpoints: eps}
	if c.local {
		st = resolver.StateWithLocality(st, resolver.Locality{Zone: "z1"})
	}
	r.InitialState(st)
	return r
}

// pickBench returns a function that picks once for a call of ctx and calls
// the result's Done (a successful call) on the picker the policy publishes
// over the cluster, and a function that closes the channel.
func pickBench(c *cluster, policy string, ctx context.Context) (one func() error, closeConn func(), err error) {
	conn, err := c.dial(policy, true)
	if err != nil {
		return nil, nil, err
	}
	p := captures[policy].last()
	info := balancer.PickInfo{FullMethodName: "/grpc.health.v1.Health/Check", Ctx: ctx}
	done := balancer.DoneInfo{BytesSent: true, BytesReceived: true}
	one = func() error {
		res, err := p.Pick(info)
		if err != nil {
			return err
		}
		if res.Done != nil {
			res.Done(done)
		}
		return nil
	}
	return one, func() { conn.Close() }, nil
}

// benchPick runs Pick+Done b.N times, on one goroutine or on all.
func benchPick(b *testing.B, one func() error, parallel bool) {
	b.ReportAllocs()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := one(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		return
	}
	for b.Loop() {
		if err := one(); err != nil {
			b.Fatal(err)
		}
	}
}

// pickCost measures Pick+Done with testing.Benchmark (for the command;
// benchmarks call benchPick).
func pickCost(c *cluster, policy string, parallel bool) (testing.BenchmarkResult, error) {
	one, closeConn, err := pickBench(c, policy, context.Background())
	if err != nil {
		return testing.BenchmarkResult{}, err
	}
	defer closeConn()
	var failed atomic.Bool
	r := testing.Benchmark(func(b *testing.B) {
		benchPick(b, one, parallel)
		failed.Store(b.Failed())
	})
	if failed.Load() {
		return r, fmt.Errorf("%s: Pick failed", policy)
	}
	return r, nil
}

// tail is the latency distribution of a fixed number of calls.
type tail struct {
	p50, p99, p999 time.Duration
	slowShare      float64 // share of calls served by the slow backend
	wall           time.Duration
	failed         int
}

// tailLatency makes calls unary calls at the given concurrency through a
// new channel with the policy, and returns their latency percentiles.
func tailLatency(c *cluster, policy string, calls, concurrency int) (tail, error) {
	conn, err := c.dial(policy, false)
	if err != nil {
		return tail{}, err
	}
	defer conn.Close()
	lat := make([]time.Duration, calls)
	var (
		next, failed, slow atomic.Int64
		wg                 sync.WaitGroup
	)
	slowAddr := c.backends[0].addr
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(calls) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				addr, err := call(ctx, conn)
				lat[i] = time.Since(t0)
				cancel()
				if err != nil {
					failed.Add(1)
				} else if addr == slowAddr {
					slow.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return tail{
		p50: q(0.50), p99: q(0.99), p999: q(0.999),
		slowShare: float64(slow.Load()) / float64(calls),
		wall:      wall, failed: int(failed.Load()),
	}, nil
}

// failures is the outcome of a failing-backend run.
type failures struct {
	calls, failed         int // in all
	lateCalls, lateFailed int // started after the first second
}

// failingShare makes unary calls at the given concurrency for d through a
// new channel with the policy while the first backend fails every call,
// and counts the failures, in all and among the calls started after the
// first second.
func failingShare(c *cluster, policy string, d time.Duration, concurrency int) (failures, error) {
	conn, err := c.dial(policy, false)
	if err != nil {
		return failures{}, err
	}
	defer conn.Close()
	c.failing(true)
	defer c.failing(false)
	var (
		mu sync.Mutex
		f  failures
		wg sync.WaitGroup
	)
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine failures
			for {
				t0 := time.Now()
				since := t0.Sub(start)
				if since >= d {
					break
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := call(ctx, conn)
				cancel()
				mine.calls++
				late := since >= time.Second
				if late {
					mine.lateCalls++
				}
				if err != nil {
					mine.failed++
					if late {
						mine.lateFailed++
					}
				}
			}
			mu.Lock()
			f.calls += mine.calls
			f.failed += mine.failed
			f.lateCalls += mine.lateCalls
			f.lateFailed += mine.lateFailed
			mu.Unlock()
		}()
	}
	wg.Wait()
	return f, nil
}
