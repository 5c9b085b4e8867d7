// Package testbackend runs real gRPC servers on loopback for tests: each
// serves the standard health service, counts the calls it handles (and, on
// request, logs when they arrive), and can be made slow or failing.
package testbackend

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Backend is one gRPC server on a loopback port.
type Backend struct {
	// Addr is the host:port the server listens on.
	Addr string
	// Health is the server's health service; set a status to take it out
	// of client-side health checking.
	Health *health.Server

	srv   *grpc.Server
	calls atomic.Int64
	delay atomic.Int64 // nanoseconds added to each call
	fail  atomic.Bool
	done  chan struct{}

	mu      sync.Mutex
	refuser net.Listener  // holds Addr after Crash; nil before
	refused chan struct{} // closed when the refusing loop ends

	arrivals arrivals
}

// Start starts a backend on 127.0.0.1 and stops it at t.Cleanup.
func Start(t testing.TB) *Backend {
	t.Helper()
	return StartOn(t, "127.0.0.1:0")
}

// StartOn starts a backend listening on addr (a loopback address) and stops
// it at t.Cleanup.
func StartOn(t testing.TB, addr string) *Backend {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("testbackend: listen: %v", err)
	}
	b := &Backend{Addr: lis.Addr().String(), Health: health.NewServer(), done: make(chan struct{})}
	b.srv = grpc.NewServer(grpc.UnaryInterceptor(b.intercept))
	healthpb.RegisterHealthServer(b.srv, b.Health)
	go func() {
		defer close(b.done)
		_ = b.srv.Serve(lis)
	}()
	t.Cleanup(b.Stop)
	return b
}

func (b *Backend) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	b.calls.Add(1)
	b.arrivals.add()
	if d := time.Duration(b.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if b.fail.Load() {
		return nil, status.Error(codes.Unavailable, "testbackend: failing on purpose")
	}
	return h(ctx, req)
}

// Calls returns how many unary calls the backend received.
func (b *Backend) Calls() int64 { return b.calls.Load() }

// ResetCalls sets the call count to zero.
func (b *Backend) ResetCalls() { b.calls.Store(0) }

// SetDelay adds d to every call.
func (b *Backend) SetDelay(d time.Duration) { b.delay.Store(int64(d)) }

// SetFailing makes every call fail with Unavailable, or stops that.
func (b *Backend) SetFailing(fail bool) { b.fail.Store(fail) }

// Stop stops the server at once, and ends a Crash's refusal, freeing the
// port. It is idempotent.
func (b *Backend) Stop() {
	b.srv.Stop()
	<-b.done
	b.mu.Lock()
	r, refused := b.refuser, b.refused
	b.refuser = nil
	b.mu.Unlock()
	if r != nil {
		_ = r.Close()
		<-refused
	}
}

// Crash stops the server as a crashed process does: its connections end,
// and every new connection to Addr is reset at once, until Stop (the test's
// cleanup). Unlike Stop it keeps Addr bound, so that no other server (of
// another test process) can take the port while clients still dial it.
// The port is free for a moment between the two; Crash fails the test if
// another listener took it meanwhile.
func (b *Backend) Crash(t testing.TB) {
	t.Helper()
	b.srv.Stop()
	<-b.done
	lis, err := net.Listen("tcp", b.Addr)
	if err != nil {
		t.Fatalf("testbackend: keep %s refusing after the crash: %v", b.Addr, err)
	}
	refused := make(chan struct{})
	b.mu.Lock()
	b.refuser, b.refused = lis, refused
	b.mu.Unlock()
	go func() {
		defer close(refused)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with a reset, as a port nobody serves answers
			}
			_ = c.Close()
		}
	}()
}

// Call makes one unary call (a health check) on conn and returns the
// address of the backend that served it.
func Call(ctx context.Context, conn grpc.ClientConnInterface, opts ...grpc.CallOption) (string, error) {
	var p peer.Peer
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, append(opts, grpc.Peer(&p))...)
	if err != nil {
		return "", err
	}
	return p.Addr.String(), nil
}
