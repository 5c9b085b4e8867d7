package main

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// backend is a gRPC server on loopback serving the health service, whose
// unary calls can be delayed. (internal/testkit/testbackend needs a testing.TB;
// this program runs outside tests.)
type backend struct {
	addr  string
	srv   *grpc.Server
	delay atomic.Int64 // ns added to each unary call
	fail  atomic.Bool  // every unary call fails with Unavailable
	lis   net.Listener
	done  chan struct{}

	// A cold backend adds coldExtra to a call, decaying linearly to 0
	// over coldFor from its start (startCold).
	coldFrom  time.Time
	coldExtra time.Duration
	coldFor   time.Duration
}

// startCold starts a backend whose calls take extra more at its start,
// decaying linearly to nothing over d: a process with cold caches.
func startCold(extra, d time.Duration) (*backend, error) {
	b, err := newBackend()
	if err != nil {
		return nil, err
	}
	b.coldFrom, b.coldExtra, b.coldFor = time.Now(), extra, d
	b.serve()
	return b, nil
}

// coldDelay is what the backend's coldness adds to a call now.
func (b *backend) coldDelay() time.Duration {
	if b.coldFor <= 0 {
		return 0
	}
	left := b.coldFor - time.Since(b.coldFrom)
	if left <= 0 {
		return 0
	}
	return time.Duration(float64(b.coldExtra) * float64(left) / float64(b.coldFor))
}

func startBackend() (*backend, error) {
	b, err := newBackend()
	if err != nil {
		return nil, err
	}
	b.serve()
	return b, nil
}

// newBackend listens; serve starts serving.
func newBackend() (*backend, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &backend{addr: lis.Addr().String(), lis: lis, done: make(chan struct{})}
	b.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if b.fail.Load() {
			return nil, status.Error(codes.Unavailable, "failing on purpose")
		}
		if d := time.Duration(b.delay.Load()) + b.coldDelay(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(b.srv, health.NewServer())
	return b, nil
}

func (b *backend) serve() {
	go func() {
		defer close(b.done)
		_ = b.srv.Serve(b.lis)
	}()
}

// gracefulStop stops the backend after its calls in flight.
func (b *backend) gracefulStop() {
	b.srv.GracefulStop()
	<-b.done
}

func (b *backend) stop() {
	b.srv.Stop()
	<-b.done
}

// call makes one unary call and returns the serving backend's address.
func call(ctx context.Context, conn grpc.ClientConnInterface, opts ...grpc.CallOption) (string, error) {
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, append(opts, grpc.Peer(&p))...); err != nil {
		return "", err
	}
	return p.Addr.String(), nil
}
