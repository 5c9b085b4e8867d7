package xds_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/internal/testbackend"
	"github.com/musterhq/muster/xds"
)

// waitStats polls the control plane's counters until cond holds, failing
// after 15 s.
func waitStats(t *testing.T, cp *xds.Server, what string, cond func(xds.Stats) bool) xds.Stats {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := cp.Stats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15s, still not %s: %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond) // polling counters: no event to wait on
	}
}

// With 50 services watched by one client, a change of one service sends
// that service's endpoints and nothing else. The services are found through
// the Discovery's ServiceLister.
func TestOneChangeOnePush(t *testing.T) {
	e := newEnv(t, xds.WithListInterval(50*time.Millisecond))
	be, be2 := testbackend.Start(t), testbackend.Start(t)
	const n = 50
	name := func(i int) string { return fmt.Sprintf("svc-%02d", i) }
	for i := range n {
		e.register(t, name(i), "a", be.Addr, "", 0, false)
	}
	b := e.xdsResolver(t, "client-1", "")
	for i := range n {
		dialWith(t, b, name(i)).Connect()
	}
	before := waitStats(t, e.cp, "every service's endpoints sent", func(st xds.Stats) bool {
		for i := range n {
			if st.Pushes[name(i)].Endpoints == 0 {
				return false
			}
		}
		return true
	})

	changed := name(7)
	e.register(t, changed, "b", be2.Addr, "", 0, false)
	after := waitStats(t, e.cp, "the change sent and acknowledged", func(st xds.Stats) bool {
		return st.Pushes[changed].Endpoints > before.Pushes[changed].Endpoints && st.ACKs > before.ACKs
	})
	for i := range n {
		svc := name(i)
		want := before.Pushes[svc]
		if svc == changed {
			want.Endpoints++
		}
		if got := after.Pushes[svc]; got != want {
			t.Errorf("%s: pushes %+v, want %+v", svc, got, want)
		}
	}
	var total uint64
	for _, p := range after.Pushes {
		total += p.Total()
	}
	t.Logf("%d services, %d resources pushed in all; the change pushed %d", n, total,
		after.Pushes[changed].Total()-before.Pushes[changed].Total())
	noNACK(t, e.cp)
}

// A NACKed version is never sent again: the client's next response is the
// next change, even when it rejected the very first response (the empty
// version, which go-control-plane alone would answer with everything at
// once, forever).
func TestNACKNoResend(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	waitStats(t, e.cp, "greeter published", func(st xds.Stats) bool { return st.Services == 1 })

	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &discoveryv3.DiscoveryRequest{
		Node:          &corev3.Node{Id: "raw"},
		TypeUrl:       resourcev3.EndpointType,
		ResourceNames: []string{"greeter"},
	}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || len(first.GetResources()) != 1 {
		t.Fatalf("first response %v, error %v: want greeter's endpoints", first, err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl:       resourcev3.EndpointType,
		ResourceNames: []string{"greeter"},
		VersionInfo:   "", // nothing accepted yet
		ResponseNonce: first.GetNonce(),
		ErrorDetail:   &statuspb.Status{Code: 3, Message: "rejected by the test"},
	}); err != nil {
		t.Fatal(err)
	}
	waitStats(t, e.cp, "the NACK counted", func(st xds.Stats) bool { return st.NACKs == 1 })

	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := next.GetResources()[0].UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	if next.GetVersionInfo() == first.GetVersionInfo() || len(cla.GetEndpoints()[0].GetLbEndpoints()) != 2 {
		t.Fatalf("after a NACK of version %s, got version %s with %d endpoints: want the next change (2 endpoints), not a resend",
			first.GetVersionInfo(), next.GetVersionInfo(), len(cla.GetEndpoints()[0].GetLbEndpoints()))
	}
}
