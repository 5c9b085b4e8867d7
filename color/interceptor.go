package color

import (
	"context"

	"google.golang.org/grpc"
)

// UnaryServerInterceptor returns a unary server interceptor that copies the
// color and canary key of each incoming call to the handler's context
// (WithColor, WithKey), so
// that the calls the handler makes with that context carry it on along the
// call chain. A call with neither is passed on unchanged. Muster's
// server package installs it by default; use it with grpc.ChainUnaryInterceptor
// in other servers.
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(propagate(ctx), req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming calls:
// the stream the handler gets returns the colored context from Context.
func StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if c := propagate(ctx); c != ctx {
			ss = coloredStream{ServerStream: ss, ctx: c}
		}
		return handler(srv, ss)
	}
}

// propagate returns ctx with the incoming color and canary key set for
// outgoing calls, or ctx itself for a call with neither.
func propagate(ctx context.Context) context.Context {
	out := ctx
	if c := FromIncomingContext(ctx); c != "" {
		out = WithColor(out, c)
	}
	if k := KeyFromIncomingContext(ctx); k != "" {
		out = WithKey(out, k)
	}
	return out
}

// coloredStream is a ServerStream whose Context carries the color.
type coloredStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the colored context.
func (s coloredStream) Context() context.Context { return s.ctx }
