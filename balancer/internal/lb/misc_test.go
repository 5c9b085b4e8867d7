package lb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

func TestClassify(t *testing.T) {
	sent := func(err error) balancer.DoneInfo { return balancer.DoneInfo{Err: err, BytesSent: true} }
	for _, tc := range []struct {
		info balancer.DoneInfo
		want Outcome
	}{
		{balancer.DoneInfo{}, NotSent}, // the transport was not ready
		{sent(nil), Success},
		{sent(io.EOF), Success},
		{sent(status.Error(codes.Unavailable, "")), Failure},
		{balancer.DoneInfo{Err: status.Error(codes.Unavailable, "")}, Failure}, // failed before any byte went out
		{sent(status.Error(codes.DeadlineExceeded, "")), Failure},
		{sent(status.Error(codes.ResourceExhausted, "")), Failure},
		{sent(status.Error(codes.Internal, "")), Failure},
		{sent(status.Error(codes.DataLoss, "")), Failure},
		{sent(status.Error(codes.Unimplemented, "")), Failure},
		{sent(fmt.Errorf("wrapped: %w", status.Error(codes.Unavailable, ""))), Failure},
		{sent(errors.New("connection reset by peer")), Failure},
		{sent(status.Error(codes.Canceled, "")), Canceled},
		{sent(status.FromContextError(context.Canceled).Err()), Canceled},
		{sent(status.Error(codes.NotFound, "")), Success},
		{sent(status.Error(codes.InvalidArgument, "")), Success},
		{sent(status.Error(codes.PermissionDenied, "")), Success},
		{sent(status.Error(codes.Unknown, "handler error")), Success},
	} {
		if got := Classify(tc.info); got != tc.want {
			t.Errorf("Classify(%+v) = %v, want %v", tc.info, got, tc.want)
		}
	}
}

func TestWeightDefaultsTo100WithoutAnInstance(t *testing.T) {
	for _, ep := range []grpcresolver.Endpoint{
		{Addresses: []grpcresolver.Address{{Addr: "10.0.0.1:1"}}},
		{Addresses: []grpcresolver.Address{{Addr: "10.0.0.1:1"}}, Attributes: attributes.New("other", "attr")},
	} {
		if got := Weight(ep); got != 100 {
			t.Errorf("Weight(%v) = %d, want 100", ep, got)
		}
	}
}

func TestKey(t *testing.T) {
	a := grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: "b:1"}, {Addr: "a:1"}}}
	b := grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: "a:1"}, {Addr: "b:1"}}}
	if Key(a) != Key(b) {
		t.Errorf("Key depends on address order: %q, %q", Key(a), Key(b))
	}
	if got := Key(grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: "a:1"}}}); got != "a:1" {
		t.Errorf("Key of a one-address endpoint = %q, want the address", got)
	}
}

func TestClassifyDoesNotAllocate(t *testing.T) {
	fail := balancer.DoneInfo{Err: status.Error(codes.Unavailable, "x"), BytesSent: true}
	ok := balancer.DoneInfo{BytesSent: true}
	if n := testing.AllocsPerRun(100, func() { _ = Classify(fail) == Classify(ok) }); n != 0 {
		t.Fatalf("Classify allocates %v times", n)
	}
}
