package lb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
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
		{},
	} {
		for _, table := range []EndpointWeights{nil, {"10.0.0.2:1": 300}} {
			if got := weightOf(ep, table); got != 100 {
				t.Errorf("weightOf(%v, %v) = %d, want 100", ep, table, got)
			}
		}
	}
}

// Without an instance, the table gives the weight by the first address; an
// instance's own weight wins over the table.
func TestWeightFromTheTable(t *testing.T) {
	table := EndpointWeights{"10.0.0.1:1": 300, "10.0.0.2:1": 7}
	two := grpcresolver.Endpoint{Addresses: []grpcresolver.Address{{Addr: "10.0.0.1:1"}, {Addr: "10.0.0.2:1"}}}
	if got := weightOf(two, table); got != 300 {
		t.Errorf("weightOf(%v) = %d, want 300 (the first address's)", two, got)
	}
	in := lbattr.Endpoint(&registry.Instance{Name: "svc", ID: "i", Addr: "10.0.0.1:1", Weight: 50})
	if got := weightOf(in, table); got != 50 {
		t.Errorf("weightOf(instance of weight 50) = %d, want 50: the instance wins", got)
	}
}

func TestParseEndpointWeights(t *testing.T) {
	for _, js := range []string{``, ` `, `null`, `{}`} {
		if got, err := ParseEndpointWeights([]byte(js)); err != nil || got != nil {
			t.Errorf("ParseEndpointWeights(%s) = %v, %v; want nil, nil", js, got, err)
		}
	}
	got, err := ParseEndpointWeights([]byte(`{"10.0.0.7:9000": 200, "[::1]:80": 1, "db.local:5": 10000}`))
	if err != nil || len(got) != 3 || got["10.0.0.7:9000"] != 200 || got["[::1]:80"] != 1 || got["db.local:5"] != 10000 {
		t.Errorf("ParseEndpointWeights = %v, %v", got, err)
	}
	for _, tc := range []struct{ js, want string }{
		{`{"10.0.0.7:9000": 0}`, `endpointWeights: "10.0.0.7:9000": weight 0 is out of range 1..10000`},
		{`{"10.0.0.7:9000": 10001}`, `endpointWeights: "10.0.0.7:9000": weight 10001 is out of range 1..10000`},
		{`{"10.0.0.7:9000": -3}`, `endpointWeights: "10.0.0.7:9000": weight -3 is out of range 1..10000`},
		{`{"10.0.0.7:9000": null}`, `endpointWeights: "10.0.0.7:9000": weight null is out of range 1..10000`},
		{`{"10.0.0.7:9000": 1.5}`, `endpointWeights: "10.0.0.7:9000": weight 1.5 is not an integer`},
		{`{"10.0.0.7:9000": "200"}`, `endpointWeights: "10.0.0.7:9000": weight "200" is not an integer`},
		{`{"10.0.0.7": 200}`, `endpointWeights: "10.0.0.7" is not a host:port address`},
		{`{":9000": 200}`, `endpointWeights: ":9000" is not a host:port address`},
		{`{"": 200}`, `endpointWeights: "" is not a host:port address`},
		{`{"b:1": 0, "a:1": 0}`, `endpointWeights: "a:1": weight 0`}, // the first in address order
		{`[1]`, `endpointWeights: json: cannot unmarshal array`},
		{`{"a:1": 1} {}`, `endpointWeights: unexpected data after the JSON object`},
	} {
		_, err := ParseEndpointWeights([]byte(tc.js))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ParseEndpointWeights(%s) error = %v, want one starting with %q", tc.js, err, tc.want)
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
