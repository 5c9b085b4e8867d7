package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/server"
)

// Each test here proves one step of Shutdown: it fails when that step is
// taken out of Server.Shutdown (checked by hand, see the commit message).

// TestShutdownDeregistersBeforeItStopsAccepting: a client following the
// service through the muster resolver loses the instance from its
// resolver state while the server still accepts calls. Without the
// deregistration the instance stays in the state until its lease goes,
// after Shutdown has returned.
func TestShutdownDeregistersBeforeItStopsAccepting(t *testing.T) {
	e := newEnv(t)
	// The drain delay only has to outlast the deregistration's way to the
	// client (milliseconds, docs/BENCHMARKS.md); the test ends as soon as
	// the client has seen it, so a long delay costs nothing.
	a := e.start(t, "a", server.WithDrainDelay(10*time.Second))
	b := e.start(t, "b")
	addrA, addrB := a.s.Instance().Addr, b.s.Instance().Addr

	states := followStates(t, e, addrA, addrB)
	direct := directConn(t, addrA)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	start := time.Now()
	go func() { shut <- a.s.Shutdown(ctx) }()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case addrs := <-states:
			if slices.Contains(addrs, addrA) {
				continue
			}
			seen := time.Since(start)
			// a left the client's resolver state; a must still serve.
			if got, err := testbackend.Call(ctx, direct); err != nil || got != addrA {
				t.Fatalf("a call straight to a after the client's resolver dropped it (%v after Shutdown began) = %q, %v; want served by a, which must still accept calls",
					seen.Round(time.Millisecond), got, err)
			}
			t.Logf("a left the client's resolver state %v after Shutdown began (state %v), while a still served", seen.Round(time.Millisecond), addrs)
			cancel() // end the drain delay: the test has what it needs
			<-shut
			return
		case err := <-shut:
			t.Fatalf("Shutdown returned (%v) after %v, and the server stopped accepting calls, while the client's resolver state still held %s: the instance was not deregistered first",
				err, time.Since(start).Round(time.Millisecond), addrA)
		case <-timeout:
			t.Fatalf("the client's resolver state still held %s 10s after Shutdown began: Shutdown did not deregister it", addrA)
		}
	}
}

// TestShutdownServesThroughTheDrainDelay: after Shutdown begins, the server
// keeps accepting calls for the whole drain delay, as seen by a client
// connected to it: its connection stays READY (no GOAWAY) and its calls
// succeed until the delay has passed. Without the delay the server sends
// GOAWAY within milliseconds (the deregistration's round trip).
func TestShutdownServesThroughTheDrainDelay(t *testing.T) {
	const delay = 1500 * time.Millisecond
	e := newEnv(t)
	a := e.start(t, "a", server.WithDrainDelay(delay))
	addr := a.s.Instance().Addr
	direct := directConn(t, addr)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	start := time.Now()
	go func() { shut <- a.s.Shutdown(ctx) }()

	// Calls keep succeeding; the first failure or GOAWAY marks the end of
	// serving. Each call waits for its answer, so this loop is paced by
	// the server, not by a sleep. The server stopped serving between the
	// last call that succeeded and the moment the failure was seen: only
	// a failure seen before the delay has passed since Shutdown began
	// (which started the delay no earlier) proves that it stopped early.
	var calls int
	var lastOK, stopSeen time.Duration
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := testbackend.Call(cctx, direct)
		ccancel()
		if err != nil || direct.GetState() != connectivity.Ready {
			stopSeen = time.Since(start)
			break
		}
		calls++
		lastOK = time.Since(start)
		if lastOK > delay {
			break
		}
	}
	t.Logf("%d calls served during the %v drain delay, the last %v after Shutdown began", calls, delay, lastOK.Round(time.Millisecond))
	if lastOK <= delay && stopSeen < delay {
		t.Fatalf("the server stopped serving a connected client %v after Shutdown began (last call served at %v), before the %v drain delay had passed",
			stopSeen.Round(time.Millisecond), lastOK.Round(time.Millisecond), delay)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestShutdownLetsAnInFlightCallFinish: a unary call in flight when the
// server stops accepting (its handler blocked until the test releases it,
// after the client's connection got GOAWAY) completes successfully, and
// Shutdown waits for it. Stop instead of GracefulStop would cut it.
func TestShutdownLetsAnInFlightCallFinish(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseAll)
	block := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(blockKey)) > 0 {
			close(entered)
			<-release
		}
		return h(ctx, req)
	}
	e := newEnv(t)
	a := e.start(t, "a", server.WithDrainDelay(0), server.WithGRPCOptions(grpc.ChainUnaryInterceptor(block)))
	direct := directConn(t, a.s.Instance().Addr)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	called := make(chan error, 1)
	go func() {
		_, err := testbackend.Call(metadata.AppendToOutgoingContext(ctx, blockKey, "1"), direct)
		called <- err
	}()
	select {
	case <-entered:
	case err := <-called:
		t.Fatalf("the blocking call ended before its handler ran: %v", err)
	case <-ctx.Done():
		t.Fatal("the blocking call's handler did not run within 30s")
	}

	shut := make(chan error, 1)
	go func() { shut <- a.s.Shutdown(ctx) }()
	// The server stops accepting: the client's connection leaves READY
	// (GOAWAY from GracefulStop, or the connection closed by Stop).
	if !direct.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatal("the client's connection stayed READY for 30s after Shutdown began")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a call was in flight", err)
	case err := <-called:
		t.Fatalf("the in-flight call ended (%v) before its handler was released: the server cut it", err)
	default:
	}
	releaseAll()
	if err := <-called; err != nil {
		t.Fatalf("the call in flight when Shutdown began failed: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// blockKey is the metadata key that makes a test handler block.
const blockKey = "muster-test-block"

// directConn returns a READY client connection to addr alone.
func directConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := testbackend.Call(ctx, conn, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("call straight to %s: %v", addr, err)
	}
	return conn
}

// stateRecorder wraps a resolver builder and sends the addresses of every
// state its resolvers hand the channel.
// followStates opens a channel on greeter through e's resolver
// (muster_p2c), waits for a state holding addrs, and returns the channel's
// states from then on (the addresses of each).
func followStates(t *testing.T, e *env, addrs ...string) <-chan []string {
	t.Helper()
	states := make(chan []string, 256)
	rb := &stateRecorder{Builder: e.b, states: states}
	conn, err := grpc.NewClient("muster:///greeter", grpc.WithResolvers(rb),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_p2c":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	conn.Connect()
	awaitState(t, states, fmt.Sprintf("a state with %v", addrs), func(got []string) bool {
		for _, a := range addrs {
			if !slices.Contains(got, a) {
				return false
			}
		}
		return true
	})
	return states
}

type stateRecorder struct {
	grpcresolver.Builder
	states chan<- []string
}

func (r *stateRecorder) Build(t grpcresolver.Target, cc grpcresolver.ClientConn, o grpcresolver.BuildOptions) (grpcresolver.Resolver, error) {
	return r.Builder.Build(t, recordingCC{ClientConn: cc, states: r.states}, o)
}

type recordingCC struct {
	grpcresolver.ClientConn
	states chan<- []string
}

func (c recordingCC) UpdateState(s grpcresolver.State) error {
	var addrs []string
	for _, ep := range s.Endpoints {
		for _, a := range ep.Addresses {
			addrs = append(addrs, a.Addr)
		}
	}
	select {
	case c.states <- addrs:
	default: // the test reads every state it needs; never block the resolver
	}
	return c.ClientConn.UpdateState(s)
}

// awaitState reads states until one satisfies cond, failing t after 10s.
func awaitState(t *testing.T, states <-chan []string, what string, cond func([]string) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	var last []string
	for {
		select {
		case addrs := <-states:
			if cond(addrs) {
				return
			}
			last = addrs
		case <-timeout:
			t.Fatalf("no resolver state with %s within 10s; last %v", what, last)
		}
	}
}
