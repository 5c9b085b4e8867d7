package color

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

func TestWithColorReplacesAndRemoves(t *testing.T) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "42", Header, "green")
	ctx = WithColor(ctx, "blue")
	if got := FromContext(ctx); got != "blue" {
		t.Fatalf("FromContext after WithColor(blue) = %q", got)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	if !slices.Equal(md[Header], []string{"blue"}) || !slices.Equal(md["x-user"], []string{"42"}) {
		t.Fatalf("outgoing metadata %v, want one color (blue) and x-user kept", md)
	}
	ctx = WithColor(ctx, "")
	md, _ = metadata.FromOutgoingContext(ctx)
	if got := FromContext(ctx); got != "" || len(md[Header]) != 0 {
		t.Fatalf("after WithColor(\"\"): FromContext %q, metadata %v", got, md)
	}
	if got := FromContext(metadata.AppendToOutgoingContext(context.Background(), "X-Muster-Color", "red")); got != "red" {
		t.Fatalf("FromContext of plain metadata = %q, want red", got)
	}
	//lint:ignore SA1012 a nil context is documented as uncolored
	if got := FromContext(nil); got != "" {
		t.Fatalf("FromContext(nil) = %q", got)
	}
}

func TestFromContextDoesNotAllocate(t *testing.T) {
	ctx := WithKey(WithColor(metadata.AppendToOutgoingContext(context.Background(), "x-user", "42"), "blue"), "user-42")
	bare := metadata.AppendToOutgoingContext(context.Background(), "x-user", "42")
	if n := testing.AllocsPerRun(1000, func() {
		_, _, _ = FromContext(ctx), KeyFromContext(ctx), FromContext(bare)
	}); n != 0 {
		t.Fatalf("FromContext/KeyFromContext allocate %v times", n)
	}
}

func TestInterceptorsCopyTheIncomingColorAndKey(t *testing.T) {
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(Header, "blue", KeyHeader, "user-7"))
	check := func(ctx context.Context) {
		t.Helper()
		if c, k := FromContext(ctx), KeyFromContext(ctx); c != "blue" || k != "user-7" {
			t.Fatalf("handler's outgoing color %q, key %q; want blue, user-7", c, k)
		}
	}
	_, _ = UnaryServerInterceptor()(in, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
		check(ctx)
		return nil, nil
	})
	_ = StreamServerInterceptor()(nil, fakeStream{ctx: in}, &grpc.StreamServerInfo{}, func(_ any, ss grpc.ServerStream) error {
		check(ss.Context())
		return nil
	})
	plain := context.Background()
	_, _ = UnaryServerInterceptor()(plain, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
		if ctx != plain {
			t.Fatal("an uncolored call's context was replaced")
		}
		return nil, nil
	})
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }

// KeyFromContextHeader reads the key of another header, WithKey's
// key first.
func TestKeyFromContextHeader(t *testing.T) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice", KeyHeader, "ignored")
	if got := KeyFromContextHeader(ctx, "x-user"); got != "alice" {
		t.Errorf("x-user key %q, want alice", got)
	}
	if got := KeyFromContextHeader(WithKey(ctx, "bob"), "x-user"); got != "bob" {
		t.Errorf("key with WithKey %q, want bob", got)
	}
	if got := KeyFromContextHeader(context.Background(), "x-user"); got != "" {
		t.Errorf("no key: %q", got)
	}
}
