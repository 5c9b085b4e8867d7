package etcdtest

import (
	"context"
	"maps"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Method names counted in RPCStats.Calls, besides gRPC's full method names.
const (
	// MethodAuthenticate is the request that exchanges a user name and
	// password for a token (and costs the server a bcrypt comparison).
	MethodAuthenticate = "/etcdserverpb.Auth/Authenticate"
	// MethodWatchCreate counts the watch create requests sent on watch
	// streams; the streams themselves count under
	// "/etcdserverpb.Watch/Watch".
	MethodWatchCreate = "/etcdserverpb.Watch/Watch#create"
)

// RPCStats counts the requests the members of a cluster served, through
// every endpoint (proxied or direct), since Start.
type RPCStats struct {
	// Calls counts requests by gRPC full method name
	// ("/etcdserverpb.KV/Range"); a stream counts once, when it opens.
	// Watch create requests count under MethodWatchCreate.
	Calls map[string]int64
	// Errors counts failures by etcd's error message
	// ("etcdserver: invalid auth token"): requests and streams that ended
	// with an error, and watches etcd refused or cancelled (by their
	// cancel reason).
	Errors map[string]int64
}

// rpcCounter implements RPCStats for one cluster; its interceptors are
// installed on every member.
type rpcCounter struct {
	mu     sync.Mutex
	calls  map[string]int64
	errors map[string]int64
}

func newRPCCounter() *rpcCounter {
	return &rpcCounter{calls: map[string]int64{}, errors: map[string]int64{}}
}

func (c *rpcCounter) call(method string) {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
}

func (c *rpcCounter) fail(err error) {
	if err == nil {
		return
	}
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		msg = s.Message()
	}
	c.mu.Lock()
	c.errors[msg]++
	c.mu.Unlock()
}

func (c *rpcCounter) stats() RPCStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return RPCStats{Calls: maps.Clone(c.calls), Errors: maps.Clone(c.errors)}
}

// serverOptions returns the interceptors that count requests. They run
// inside etcd's own interceptors, so requests etcd refuses before its
// handlers (such as a stream requiring a leader while there is none) are
// not counted.
func (c *rpcCounter) serverOptions() []grpc.ServerOption {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c.call(info.FullMethod)
		resp, err := handler(ctx, req)
		c.fail(err)
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		c.call(info.FullMethod)
		err := handler(srv, countingStream{ServerStream: ss, c: c})
		if err != nil && ss.Context().Err() == nil {
			c.fail(err)
		}
		return err
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary),
		grpc.ChainStreamInterceptor(stream),
	}
}

// countingStream counts watch creations and their refusals on a stream.
type countingStream struct {
	grpc.ServerStream
	c *rpcCounter
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if req, ok := m.(*pb.WatchRequest); ok && err == nil && req.GetCreateRequest() != nil {
		s.c.call(MethodWatchCreate)
	}
	return err
}

func (s countingStream) SendMsg(m any) error {
	if resp, ok := m.(*pb.WatchResponse); ok && resp.Canceled && resp.CancelReason != "" {
		s.c.mu.Lock()
		s.c.errors[resp.CancelReason]++
		s.c.mu.Unlock()
	}
	return s.ServerStream.SendMsg(m)
}
