package xds_test

import (
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/xds"
)

// waitClients polls the control plane's client list until cond holds,
// failing after 15 s.
func waitClients(t *testing.T, cp *xds.Server, what string, cond func([]xds.ClientStatus) bool) []xds.ClientStatus {
	t.Helper()
	return poll(t, what, cp.Clients, cond)
}

// allAcked reports whether c has accepted a response of each of the four
// resource types.
func allAcked(c xds.ClientStatus) bool {
	if len(c.Types) != 4 {
		return false
	}
	for _, ts := range c.Types {
		if ts.Acked == "" || ts.Acked != ts.Sent {
			return false
		}
	}
	return true
}

// A grpc-go xDS client is listed with its node, zone, services and the
// versions it accepted, and is gone once its channel closes.
func TestClients(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "z1", 0, false)
	conn := e.dial(t, "greeter", "client-<1>", "z1")
	callUntil(t, conn, "calling a", hasAll(a.Addr))
	cs := waitClients(t, e.cp, "one client with every type acked", func(cs []xds.ClientStatus) bool {
		return len(cs) == 1 && allAcked(cs[0])
	})
	c := cs[0]
	if c.Node != "client-<1>" || c.Zone != "z1" || c.Delta || c.Since.IsZero() || !slices.Equal(c.Services, []string{"greeter"}) {
		t.Errorf("client %+v: want node client-<1> in z1, state of the world, subscribed to greeter", c)
	}
	if want := "gRPC Go " + grpc.Version; c.UserAgent != want {
		t.Errorf("user agent %q, want %q", c.UserAgent, want)
	}
	want := []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType}
	for i, ts := range c.Types {
		if ts.TypeURL != want[i] || !slices.Equal(ts.Resources, []string{"greeter"}) || ts.NACK != nil || ts.AckedAt.IsZero() {
			t.Errorf("type %d: %+v, want %s on greeter, acked, no NACK", i, ts, want[i])
		}
	}
	edsBefore := c.Types[1].Acked

	e.register(t, "greeter", "b", b.Addr, "z1", 0, false)
	callUntil(t, conn, "calling a and b", hasAll(a.Addr, b.Addr))
	cs = waitClients(t, e.cp, "the new endpoints acked", func(cs []xds.ClientStatus) bool {
		return len(cs) == 1 && allAcked(cs[0]) && cs[0].Types[1].Acked != edsBefore
	})
	if cs[0].Types[0].Acked != c.Types[0].Acked {
		t.Errorf("cluster version went from %s to %s on an endpoint change", c.Types[0].Acked, cs[0].Types[0].Acked)
	}

	_ = conn.Close()
	waitClients(t, e.cp, "no client once the channel closed", func(cs []xds.ClientStatus) bool { return len(cs) == 0 })
	noNACK(t, e.cp)
}

// A NACK is listed with the rejected version and the client's error.
func TestClientsNACK(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a := testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	waitStats(t, e.cp, "greeter published", func(st xds.Stats) bool { return st.Services == 1 })
	stream := adsStream(t, e.addr)
	first := nack(t, e, stream, resourcev3.ClusterType)
	cs := e.cp.Clients()
	if len(cs) != 1 || cs[0].Node != "raw" || len(cs[0].Types) != 1 {
		t.Fatalf("clients %+v: want the raw stream with one type", cs)
	}
	ts := cs[0].Types[0]
	if ts.NACK == nil || ts.NACK.Version != first.GetVersionInfo() || ts.NACK.Error != "rejected by the test" || ts.Acked != "" {
		t.Fatalf("cluster type %+v (NACK %+v): want version %s rejected with the test's error, none acked", ts, ts.NACK, first.GetVersionInfo())
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "renamed"}, TypeUrl: resourcev3.EndpointType,
		ResourceNames: []string{"greeter"}}); err != nil {
		t.Fatal(err)
	}
	cs = waitClients(t, e.cp, "the endpoints sent", func(cs []xds.ClientStatus) bool {
		return len(cs) == 1 && len(cs[0].Types) == 2 && cs[0].Types[1].Sent != ""
	})
	if cs[0].Node != "raw" {
		t.Errorf("node %q: want the first request's, raw", cs[0].Node)
	}
}
