package xds_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/xds"
)

// deltaClient is a raw delta (incremental) ADS stream, built from
// go-control-plane's generated client, whose responses arrive on a channel.
type deltaClient struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	got    chan *discoveryv3.DeltaDiscoveryResponse
}

func newDeltaClient(t *testing.T, addr string) *deltaClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	stream, err := adsClient(t, addr).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &deltaClient{t: t, stream: stream, got: make(chan *discoveryv3.DeltaDiscoveryResponse, 16)}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		defer close(c.got)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			c.got <- r
		}
	}()
	return c
}

func (c *deltaClient) send(req *discoveryv3.DeltaDiscoveryRequest) {
	c.t.Helper()
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// recv returns the next response, which must be of typeURL, within 10 s.
func (c *deltaClient) recv(typeURL, what string) *discoveryv3.DeltaDiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.got:
		if !ok {
			c.t.Fatalf("stream ended waiting for %s", what)
		}
		if r.GetTypeUrl() != typeURL {
			c.t.Fatalf("waiting for %s, got a %s response (resources %v, system version %s)",
				what, r.GetTypeUrl(), names(r), r.GetSystemVersionInfo())
		}
		return r
	case <-time.After(10 * time.Second):
		c.t.Fatalf("no %s within 10s", what)
	}
	return nil
}

func names(r *discoveryv3.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName()+"@"+res.GetVersion())
	}
	return out
}

// nack rejects response r.
func (c *deltaClient) nack(r *discoveryv3.DeltaDiscoveryResponse) {
	c.t.Helper()
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: 3, Message: "rejected by the test"}})
}

// Delta (incremental) ADS streams are served like state-of-the-world ones:
// the node of the stream's first request gives the zone of every later
// request, resources are counted, NACKs are counted and logged, and a
// version the client rejected is never sent again: after a NACK of its
// cluster, the client gets nothing but the answer to its next request, and
// after a NACK of its endpoints, the next change.
func TestDeltaNACKNoResend(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "z1", 0, false)
	waitStats(t, e.cp, "greeter published", func(st xds.Stats) bool { return st.Services == 1 })
	c := newDeltaClient(t, e.addr)

	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "raw-delta", Locality: &corev3.Locality{Zone: "z1"}},
		TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"greeter"}})
	cluster := c.recv(resourcev3.ClusterType, "greeter's cluster")
	if got := names(cluster); len(got) != 1 {
		t.Fatalf("cluster response %v, want greeter's", got)
	}
	c.nack(cluster)
	waitStats(t, e.cp, "the cluster's NACK counted", func(st xds.Stats) bool { return st.NACKs == 1 })

	// A resend of the rejected cluster would be queued before this
	// request is read, so it would come first.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"greeter"}})
	eds := c.recv(resourcev3.EndpointType, "greeter's endpoints, and no cluster again")
	if zones := e.cp.Stats().Zones; !slices.Contains(zones, "z1") {
		t.Errorf("zones %v: the endpoints request (no node) was not served as the stream's node (zone z1)", zones)
	}
	c.nack(eds)
	waitStats(t, e.cp, "the endpoints' NACK counted", func(st xds.Stats) bool { return st.NACKs == 2 })

	e.register(t, "greeter", "b", b.Addr, "z1", 0, false)
	// The responses up to the one with b: never the rejected version
	// again. (A republish of a's endpoints under a new version may come
	// first: seen once on a loaded machine.)
	var next *discoveryv3.DeltaDiscoveryResponse
	var extra uint64 // intermediate responses, each acknowledged
	for n := 0; n != 2; {
		if next != nil {
			extra++
			// Acknowledge the intermediate version, as a client would.
			c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: next.GetNonce()})
		}
		next = c.recv(resourcev3.EndpointType, "the next change, not the rejected endpoints again")
		var cla endpointv3.ClusterLoadAssignment
		if len(next.GetResources()) != 1 {
			t.Fatalf("after a NACK, got %v, want the next change", names(next))
		}
		if err := next.GetResources()[0].GetResource().UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		n = len(cla.GetEndpoints()[0].GetLbEndpoints())
		if next.GetResources()[0].GetVersion() == eds.GetResources()[0].GetVersion() {
			t.Fatalf("after a NACK of %v, got %v with %d endpoints again: want the next change (2 endpoints)", names(eds), names(next), n)
		}
	}
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: next.GetNonce()})
	select {
	case r := <-c.got:
		t.Fatalf("unexpected response after the ACK: %s %v", r.GetTypeUrl(), names(r))
	case <-time.After(500 * time.Millisecond): // a bound on nothing happening
	}
	st := waitStats(t, e.cp, "the ACK counted", func(st xds.Stats) bool { return st.ACKs == 1+extra })
	if p := st.Pushes["greeter"]; p.Clusters != 1 || p.Endpoints != 2+extra || st.Clients != 1 {
		t.Errorf("pushes %+v, clients %d: want 1 cluster, %d endpoints, 1 client", p, st.Clients, 2+extra)
	}
	cs := e.cp.Clients()
	if len(cs) != 1 || !cs[0].Delta || cs[0].Node != "raw-delta" || cs[0].Zone != "z1" || len(cs[0].Types) != 2 {
		t.Fatalf("clients %+v: want the delta stream of raw-delta in z1 with two types", cs)
	}
	cds, ep := cs[0].Types[0], cs[0].Types[1]
	if cds.NACK == nil || cds.NACK.Version != cluster.GetSystemVersionInfo() || cds.Acked != "" || !slices.Equal(cds.Resources, []string{"greeter"}) {
		t.Errorf("cluster %+v (NACK %+v): want version %q rejected, none acked", cds, cds.NACK, cluster.GetSystemVersionInfo())
	}
	if ep.Acked == "" || ep.Acked != next.GetSystemVersionInfo() || ep.Sent != ep.Acked || ep.NACK == nil || ep.NACK.Version != eds.GetSystemVersionInfo() {
		t.Errorf("endpoints %+v (NACK %+v): want %q acked after %q rejected", ep, ep.NACK, next.GetSystemVersionInfo(), eds.GetSystemVersionInfo())
	}
}
