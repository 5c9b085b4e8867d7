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
	done  chan struct{}
}

func startBackend() (*backend, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &backend{addr: lis.Addr().String(), done: make(chan struct{})}
	b.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if b.fail.Load() {
			return nil, status.Error(codes.Unavailable, "failing on purpose")
		}
		if d := time.Duration(b.delay.Load()); d > 0 {
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
	go func() {
		defer close(b.done)
		_ = b.srv.Serve(lis)
	}()
	return b, nil
}

func (b *backend) stop() {
	b.srv.Stop()
	<-b.done
}

// call makes one unary call and returns the serving backend's address.
func call(ctx context.Context, conn grpc.ClientConnInterface) (string, error) {
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return "", err
	}
	return p.Addr.String(), nil
}
