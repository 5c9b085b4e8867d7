package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/server"
)

// hop is a handler of the test service musterchain.Hop: it answers with
// its instance's ID, followed by the answer of the next service when
// there is one ("a-blue>b-base>c-blue").
type hop struct {
	id   string
	next *grpc.ClientConn // nil for the last service
}

func (h hop) call(ctx context.Context) (*wrapperspb.StringValue, error) {
	if h.next == nil {
		return wrapperspb.String(h.id), nil
	}
	var out wrapperspb.StringValue
	if err := h.next.Invoke(ctx, "/musterchain.Hop/Call", wrapperspb.String(""), &out); err != nil {
		return nil, err
	}
	return wrapperspb.String(h.id + ">" + out.Value), nil
}

// hopDesc describes musterchain.Hop by hand (no generated code): a unary
// Call and a server-streaming Stream sending one answer.
var hopDesc = grpc.ServiceDesc{
	ServiceName: "musterchain.Hop",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		if err := dec(new(wrapperspb.StringValue)); err != nil {
			return nil, err
		}
		h := srv.(hop)
		if icpt == nil {
			return h.call(ctx)
		}
		return icpt(ctx, nil, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/musterchain.Hop/Call"},
			func(ctx context.Context, _ any) (any, error) { return h.call(ctx) })
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return err
		}
		out, err := srv.(hop).call(ss.Context())
		if err != nil {
			return err
		}
		return ss.SendMsg(out)
	}}},
}

// startHop runs instance id of service name, blue when blue is set,
// answering musterchain.Hop through next.
func startHop(t *testing.T, e *env, name, id string, blue bool, next *grpc.ClientConn, opts ...server.Option) {
	t.Helper()
	in := registry.Instance{Name: name, ID: id}
	if blue {
		in.Metadata = map[string]string{"color": "blue"}
	}
	e.startInstance(t, in, func(g *grpc.Server) { g.RegisterService(&hopDesc, hop{id: id, next: next}) }, opts...)
}

// chain starts services a → b → c: a and c with a base and a blue
// instance, b with a base only (its options bOpts), and returns a channel
// to a.
func chain(t *testing.T, bOpts ...server.Option) *grpc.ClientConn {
	e := newEnv(t)
	toC := dial(t, e, "muster:///c")
	toB := dial(t, e, "muster:///b")
	startHop(t, e, "c", "c-base", false, nil)
	startHop(t, e, "c", "c-blue", true, nil)
	startHop(t, e, "b", "b-base", false, toC, bOpts...)
	startHop(t, e, "a", "a-base", false, toB)
	startHop(t, e, "a", "a-blue", true, toB)
	return dial(t, e, "muster:///a")
}

func callChain(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out wrapperspb.StringValue
	err := conn.Invoke(ctx, "/musterchain.Hop/Call", wrapperspb.String(""), &out)
	return out.Value, err
}

func streamChain(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, err := conn.NewStream(ctx, &hopDesc.Streams[0], "/musterchain.Hop/Stream")
	if err != nil {
		return "", err
	}
	if err := cs.SendMsg(wrapperspb.String("")); err != nil {
		return "", err
	}
	if err := cs.CloseSend(); err != nil {
		return "", err
	}
	var out wrapperspb.StringValue
	err = cs.RecvMsg(&out)
	return out.Value, err
}

// awaitPath calls until a call's path is want, failing after 10s.
func awaitPath(t *testing.T, ctx context.Context, conn *grpc.ClientConn, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got string
	var err error
	for got != want {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s of calls, the last path is %q (error %v), want %q", got, err, want)
		}
		if got, err = callChain(ctx, conn); err != nil {
			time.Sleep(10 * time.Millisecond) // pacing retries while the services register
		}
	}
}

func TestColorFollowsTheCallChain(t *testing.T) {
	conn := chain(t)
	blue := color.WithColor(context.Background(), "blue")
	const want = "a-blue>b-base>c-blue"
	awaitPath(t, blue, conn, want)
	awaitPath(t, context.Background(), conn, "a-base>b-base>c-base")
	for i := range 500 {
		got, err := callChain(blue, conn)
		if err != nil || got != want {
			t.Fatalf("blue call %d: path %q, error %v; want %q", i, got, err, want)
		}
		if got, err = streamChain(blue, conn); err != nil || got != want {
			t.Fatalf("blue stream %d: path %q, error %v; want %q", i, got, err, want)
		}
	}
	const uncolored = 10000
	for i := range uncolored {
		got, err := callChain(context.Background(), conn)
		if err != nil || strings.Contains(got, "blue") {
			t.Fatalf("uncolored call %d of %d: path %q, error %v; want no blue instance", i, uncolored, got, err)
		}
	}
	t.Logf("500 blue unary calls and 500 blue streams took %s; %d uncolored calls reached no blue instance", want, uncolored)
}

// Without the interceptor in b, the color stops at b: the mechanism the
// previous test relies on.
func TestWithoutColorPropagationTheColorStops(t *testing.T) {
	conn := chain(t, server.WithoutColorPropagation())
	blue := color.WithColor(context.Background(), "blue")
	awaitPath(t, blue, conn, "a-blue>b-base>c-base")
	for i := range 100 {
		if got, err := callChain(blue, conn); err != nil || got != "a-blue>b-base>c-base" {
			t.Fatalf("blue call %d: path %q, error %v; want it to lose its color at b", i, got, err)
		}
	}
}
