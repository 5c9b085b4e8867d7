package embedetcd

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errStopping is what RPCs in flight on a stopping server end with. Clients
// treat Unavailable like a lost connection: reads are retried and watches
// resume on another connection.
var errStopping = status.Error(codes.Unavailable, "etcd server is stopping")

// AbortOptions returns gRPC server options for an embedded etcd server
// (embed.Config.GRPCAdditionalServerOptions) that end every RPC in flight
// with errStopping once ctx is cancelled. etcd's watch and lease keepalive
// handlers return when their stream's context ends, so stopping the server
// does not wait out etcd's own request timeout for each open stream.
func AbortOptions(ctx context.Context) []grpc.ServerOption {
	unary := func(rctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		rctx, cancel := context.WithCancel(rctx)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		resp, err := handler(rctx, req)
		if err != nil && ctx.Err() != nil {
			return nil, errStopping
		}
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		parent := ss.Context()
		sctx, cancel := context.WithCancel(parent)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		err := handler(srv, abortableStream{ServerStream: ss, ctx: abortableContext{Context: sctx, parent: parent}})
		if ctx.Err() != nil {
			return errStopping
		}
		return err
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary),
		grpc.ChainStreamInterceptor(stream),
	}
}

// abortableStream is a server stream whose context is also cancelled when
// the server stops.
type abortableStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context.
func (s abortableStream) Context() context.Context { return s.ctx }

// abortableContext is a child of a stream's context that is also cancelled
// when the server stops. Err reports the parent's error if it has one, so
// that the reasons etcd attaches to a stream's context (such as "no leader")
// reach the handler unchanged.
type abortableContext struct {
	context.Context
	parent context.Context
}

// Err returns the parent's error if it is done, else the child's.
func (c abortableContext) Err() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	return c.Context.Err()
}
