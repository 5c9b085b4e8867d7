// Package balancertest has the helpers the Muster balancers' tests share:
// channels to real loopback backends, concurrent call loops, and a wrapper
// that records the balancers and pickers gRPC builds. The suites every
// balancer runs against a registry are in balancersuite.
package balancertest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/musterhq/muster/internal/testkit/testbackend"
)

// ServiceConfig returns a service config selecting policy with the given
// JSON config ("" for {}), with client-side health checking when health
// is true.
func ServiceConfig(policy, config string, health bool) string {
	if config == "" {
		config = "{}"
	}
	sc := fmt.Sprintf(`{"loadBalancingConfig":[{%q:%s}]`, policy, config)
	if health {
		sc += `,"healthCheckConfig":{"serviceName":""}`
	}
	return sc + "}"
}

// Dial creates a channel to target with the service config and closes it
// at cleanup.
func Dial(t testing.TB, target, serviceConfig string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig),
		// The channel runs what serviceConfig says: a service config
		// from the resolver (Muster's hands one unless told otherwise)
		// would replace it.
		grpc.WithDisableServiceConfig(),
	}, opts...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatalf("NewClient(%s): %v", target, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Backends starts n loopback backends.
func Backends(t testing.TB, n int) []*testbackend.Backend {
	t.Helper()
	bs := make([]*testbackend.Backend, n)
	for i := range bs {
		bs[i] = testbackend.Start(t)
	}
	return bs
}

// Endpoints returns one endpoint per backend, without attributes (as any
// resolver other than Muster's would give them).
func Endpoints(bs ...*testbackend.Backend) []grpcresolver.Endpoint {
	eps := make([]grpcresolver.Endpoint, len(bs))
	for i, b := range bs {
		eps[i] = grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: b.Addr}}}
	}
	return eps
}

// Result counts the outcome of calls.
type Result struct {
	// By counts successful calls per serving backend address.
	By map[string]int
	// OK and Failed count calls.
	OK, Failed int
	// LastErr is the last error seen.
	LastErr error
}

// Share returns the fraction of successful calls addr served.
func (r Result) Share(addr string) float64 {
	if r.OK == 0 {
		return 0
	}
	return float64(r.By[addr]) / float64(r.OK)
}

// String lists the counts in address order.
func (r Result) String() string {
	addrs := make([]string, 0, len(r.By))
	for a := range r.By {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var sb strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&sb, "%s:%d ", a, r.By[a])
	}
	fmt.Fprintf(&sb, "(ok %d, failed %d)", r.OK, r.Failed)
	return sb.String()
}

// Add adds the calls of o to r.
func (r *Result) Add(o Result) {
	if r.By == nil {
		r.By = map[string]int{}
	}
	for a, n := range o.By {
		r.By[a] += n
	}
	r.OK += o.OK
	r.Failed += o.Failed
	if o.LastErr != nil {
		r.LastErr = o.LastErr
	}
}

// Calls makes n unary calls on conn from concurrency goroutines, each
// with a 5s deadline, and counts who served them. Failed calls are
// counted, not fatal.
func Calls(conn *grpc.ClientConn, n, concurrency int) Result {
	return CallsCtx(context.Background(), conn, n, concurrency)
}

// CallsCtx is Calls with each call's context derived from ctx (which may
// carry a color or other outgoing metadata).
func CallsCtx(ctx context.Context, conn *grpc.ClientConn, n, concurrency int) Result {
	var next atomic.Int64
	return run(ctx, conn, concurrency, func() bool { return next.Add(1) <= int64(n) })
}

// CallsFor makes calls for d, like Calls.
func CallsFor(conn *grpc.ClientConn, d time.Duration, concurrency int) Result {
	end := time.Now().Add(d)
	return run(context.Background(), conn, concurrency, func() bool { return time.Now().Before(end) })
}

// CallsWhile makes calls with ctx from concurrency goroutines while more
// returns true, like Calls.
func CallsWhile(ctx context.Context, conn *grpc.ClientConn, concurrency int, more func() bool) Result {
	return run(ctx, conn, concurrency, more)
}

func run(parent context.Context, conn *grpc.ClientConn, concurrency int, more func() bool) Result {
	var (
		mu  sync.Mutex
		all Result
		wg  sync.WaitGroup
	)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := Result{By: map[string]int{}}
			for more() {
				ctx, cancel := context.WithTimeout(parent, 5*time.Second)
				addr, err := testbackend.Call(ctx, conn)
				cancel()
				if err != nil {
					r.Failed++
					r.LastErr = err
					continue
				}
				r.OK++
				r.By[addr]++
			}
			mu.Lock()
			all.Add(r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if all.By == nil {
		all.By = map[string]int{}
	}
	return all
}

// CallUntil makes calls one at a time until cond holds on the counts so
// far, failing the test after timeout.
func CallUntil(t testing.TB, conn *grpc.ClientConn, timeout time.Duration, what string, cond func(Result) bool) Result {
	t.Helper()
	return CallUntilCtx(t, context.Background(), conn, timeout, what, cond)
}

// CallUntilCtx is CallUntil with each call's context derived from ctx.
func CallUntilCtx(t testing.TB, ctx context.Context, conn *grpc.ClientConn, timeout time.Duration, what string, cond func(Result) bool) Result {
	t.Helper()
	r := Result{By: map[string]int{}}
	deadline := time.Now().Add(timeout)
	for !cond(r) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v of calls, still not %s: %v, last error %v", timeout, what, r, r.LastErr)
		}
		r.Add(CallsCtx(ctx, conn, 1, 1))
	}
	return r
}

// WaitFor polls cond every 5 ms until it holds, failing the test after
// within. It is for what the test can only observe, not be told of: a
// backend's counts, a published picker.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after %v", what, within)
		}
		time.Sleep(5 * time.Millisecond) // polling; no event to wait on
	}
}

// ServedAll returns a condition that holds once every backend served a
// call.
func ServedAll(bs ...*testbackend.Backend) func(Result) bool {
	return func(r Result) bool {
		for _, b := range bs {
			if r.By[b.Addr] == 0 {
				return false
			}
		}
		return true
	}
}

// NotServedLast holds once n calls in a row succeeded without b.
func NotServedLast(b *testbackend.Backend, n int) func(Result) bool {
	return NotServedLastSince(b, n, nil)
}

// NotServedLastSince is NotServedLast that also sets *served (unless nil)
// to when it last saw b's count move.
func NotServedLastSince(b *testbackend.Backend, n int, served *time.Time) func(Result) bool {
	last, run := int64(-1), 0
	return func(Result) bool {
		if c := b.Calls(); c != last {
			last, run = c, 0
			if served != nil {
				*served = time.Now()
			}
			return false
		}
		run++
		return run >= n
	}
}

// Capture is a balancer builder that builds the policy registered under
// Inner, recording the balancers it builds and the last state each
// publishes. Register it under its own name (NewCapture does) and select
// that name in the service config.
type Capture struct {
	name, inner string

	mu        sync.Mutex
	balancers []balancer.Balancer
	picker    balancer.Picker
	state     connectivity.State
}

var captures atomic.Int64

// NewCapture registers a Capture of the policy named inner under a new
// name (inner + "_capture" + a number). Call it at package initialization,
// as balancer.Register requires.
func NewCapture(inner string) *Capture {
	c := &Capture{name: fmt.Sprintf("%s_capture%d", inner, captures.Add(1)), inner: inner}
	balancer.Register(c)
	return c
}

// Name returns the name the Capture is registered under.
func (c *Capture) Name() string { return c.name }

// Build builds the inner policy with a ClientConn that records its states.
func (c *Capture) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := balancer.Get(c.inner).Build(recorder{ClientConn: cc, c: c}, opts)
	c.mu.Lock()
	c.balancers = append(c.balancers, b)
	c.mu.Unlock()
	return b
}

// ParseConfig delegates to the inner policy's parser, if it has one.
func (c *Capture) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	if p, ok := balancer.Get(c.inner).(balancer.ConfigParser); ok {
		return p.ParseConfig(js)
	}
	return nil, nil
}

// Balancer returns the last balancer built, nil if none.
func (c *Capture) Balancer() balancer.Balancer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.balancers) == 0 {
		return nil
	}
	return c.balancers[len(c.balancers)-1]
}

// Picker returns the last picker published and its state.
func (c *Capture) Picker() (balancer.Picker, connectivity.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.picker, c.state
}

type recorder struct {
	balancer.ClientConn
	c *Capture
}

func (r recorder) UpdateState(s balancer.State) {
	r.c.mu.Lock()
	r.c.picker, r.c.state = s.Picker, s.ConnectivityState
	r.c.mu.Unlock()
	r.ClientConn.UpdateState(s)
}
