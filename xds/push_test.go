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

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/xds"
)

// waitStats polls the control plane's counters until cond holds, failing
// after 15 s.
func waitStats(t *testing.T, cp *xds.Server, what string, cond func(xds.Stats) bool) xds.Stats {
	t.Helper()
	return poll(t, what, cp.Stats, cond)
}

// poll calls get until cond holds on its value, failing after 15 s.
func poll[T any](t *testing.T, what string, get func() T, cond func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		v := get()
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15s, still not %s: %+v", what, v)
		}
		time.Sleep(5 * time.Millisecond) // polling a snapshot: no event to wait on
	}
}

// With 50 services watched by a client (a channel and so an ADS stream per
// service: see xdsResolver), a change of one service sends that service's
// endpoints and nothing else to any stream. The services are found through
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

// adsStream opens a raw ADS stream to the control plane, ended at the
// test's end.
func adsStream(t *testing.T, addr string) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	stream, err := adsClient(t, addr).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// adsClient returns go-control-plane's generated ADS client on a plaintext
// connection to addr, closed at the test's end.
func adsClient(t *testing.T, addr string) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	// Without retries: a retrying client keeps each message it sent until
	// the server answers, which tests measuring the heap would count.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
}

// nack subscribes to greeter's resource of typeURL, receives it and
// rejects it as a client that never accepted anything does (empty
// version), then waits until the control plane has counted the NACK.
func nack(t *testing.T, e *env, stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, typeURL string) *discoveryv3.DiscoveryResponse {
	t.Helper()
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		Node: &corev3.Node{Id: "raw"}, TypeUrl: typeURL, ResourceNames: []string{"greeter"},
	}); err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || len(first.GetResources()) != 1 {
		t.Fatalf("first response %v, error %v: want greeter's resource", first, err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl:       typeURL,
		ResourceNames: []string{"greeter"},
		VersionInfo:   "", // nothing accepted yet
		ResponseNonce: first.GetNonce(),
		ErrorDetail:   &statuspb.Status{Code: 3, Message: "rejected by the test"},
	}); err != nil {
		t.Fatal(err)
	}
	waitStats(t, e.cp, "the NACK counted", func(st xds.Stats) bool { return st.NACKs == 1 })
	return first
}

// A NACKed version is never sent again: a client that rejected the very
// first response (empty version, which go-control-plane alone answers
// with everything at once for Listeners and Clusters: the NACK storm) gets
// nothing until the next change.
func TestNACKNoResend(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	waitStats(t, e.cp, "greeter published", func(st xds.Stats) bool { return st.Services == 1 })

	t.Run("cluster", func(t *testing.T) {
		// Round-robin Clusters do not change with instances, so the
		// test asks for something else on the same stream and checks
		// that nothing but its answer comes. A resend would be queued before that request
		// is even read, so it would come first or right after; the
		// 500 ms of silence asked for after the answer is a bound on
		// nothing happening, not a wait for something.
		stream := adsStream(t, e.addr)
		first := nack(t, e, stream, resourcev3.ClusterType)
		if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"greeter"}}); err != nil {
			t.Fatal(err)
		}
		got := make(chan *discoveryv3.DiscoveryResponse, 16)
		go func() {
			defer close(got)
			for {
				r, err := stream.Recv()
				if err != nil {
					return
				}
				got <- r
			}
		}()
		sawEndpoints := false
		for !sawEndpoints {
			select {
			case r := <-got:
				if r.GetTypeUrl() == resourcev3.ClusterType {
					t.Fatalf("the rejected cluster version %s was sent again (as %s)", first.GetVersionInfo(), r.GetVersionInfo())
				}
				sawEndpoints = r.GetTypeUrl() == resourcev3.EndpointType
			case <-time.After(10 * time.Second):
				t.Fatal("no answer to the endpoints request within 10s")
			}
		}
		select {
		case r := <-got:
			t.Fatalf("unexpected response after a NACK: %s version %s", r.GetTypeUrl(), r.GetVersionInfo())
		case <-time.After(500 * time.Millisecond):
		}
	})

	t.Run("endpoints", func(t *testing.T) {
		stream := adsStream(t, e.addr)
		nacks := e.cp.Stats().NACKs
		if err := stream.Send(&discoveryv3.DiscoveryRequest{
			Node: &corev3.Node{Id: "raw"}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"greeter"},
		}); err != nil {
			t.Fatal(err)
		}
		first, err := stream.Recv()
		if err != nil || len(first.GetResources()) != 1 {
			t.Fatalf("first response %v, error %v: want greeter's endpoints", first, err)
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{
			TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"greeter"},
			ResponseNonce: first.GetNonce(), ErrorDetail: &statuspb.Status{Code: 3, Message: "rejected by the test"},
		}); err != nil {
			t.Fatal(err)
		}
		waitStats(t, e.cp, "the NACK counted", func(st xds.Stats) bool { return st.NACKs == nacks+1 })

		e.register(t, "greeter", "b", b.Addr, "", 0, false)
		next, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var cla endpointv3.ClusterLoadAssignment
		if len(next.GetResources()) != 1 {
			t.Fatalf("after a NACK, got %d resources (version %s), want the next change", len(next.GetResources()), next.GetVersionInfo())
		}
		if err := next.GetResources()[0].UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		if n := len(cla.GetEndpoints()[0].GetLbEndpoints()); next.GetVersionInfo() == first.GetVersionInfo() || n != 2 {
			t.Fatalf("after a NACK of version %s, got version %s with %d endpoints: want the next change (2 endpoints)",
				first.GetVersionInfo(), next.GetVersionInfo(), n)
		}
	})
}

// On one ADS stream subscribed to the endpoints of several services (what a
// client process with channels to several services has: gRPC shares one xDS
// client per bootstrap), a change of one service sends that service's
// assignment; the response holds it and nothing of the others (xDS lets a
// state-of-the-world response for endpoints name a subset).
func TestOneChangeOnePushOnOneStream(t *testing.T) {
	const n = 20
	name := func(i int) string { return fmt.Sprintf("svc-%02d", i) }
	var names []string
	for i := range n {
		names = append(names, name(i))
	}
	e := newEnv(t, xds.WithServices(names...))
	be, be2 := testbackend.Start(t), testbackend.Start(t)
	for _, svc := range names {
		e.register(t, svc, "a", be.Addr, "", 0, false)
	}
	waitStats(t, e.cp, "every service published", func(st xds.Stats) bool { return st.Services == n })
	stream := adsStream(t, e.addr)
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "one-stream"}, TypeUrl: resourcev3.EndpointType, ResourceNames: names}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	// ACK each response until every assignment lists its instance (a
	// service published before its first instance reached the control
	// plane is sent again when it does).
	seen := map[string]bool{}
	for len(seen) < n {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("receive the first assignments: %v (have %d of %d)", err, len(seen), n)
		}
		for _, r := range resp.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := r.UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			if eps := cla.GetEndpoints(); len(eps) == 1 && len(eps[0].GetLbEndpoints()) == 1 {
				seen[cla.GetClusterName()] = true
			}
		}
		req.VersionInfo, req.ResponseNonce = resp.GetVersionInfo(), resp.GetNonce()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	changed := name(7)
	e.register(t, changed, "b", be2.Addr, "", 0, false)
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range resp.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := r.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		got = append(got, cla.GetClusterName())
	}
	if len(got) != 1 || got[0] != changed {
		t.Errorf("after a change of %s the stream got the assignments of %v, want %s's only", changed, got, changed)
	}
}
