package fleet_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/xds"
)

// runXDS is the control plane, as `muster xds` runs it: a Discovery of its
// own and an xds.Server following every service, serving ADS on a loopback
// port it prints ("addr <host:port>"), until ctx ends. Every stream comes
// from 127.0.0.1, so one client may hold every connection and stream.
func runXDS(ctx context.Context, cfg roleConfig, out *lineWriter) error {
	d, closeDiscovery, err := openDiscovery(cfg.Regions)
	if err != nil {
		return err
	}
	defer closeDiscovery()
	cp, err := xds.New(d, xds.WithLogger(quiet), xds.WithMaxConnections(1<<16), xds.WithMaxStreams(1<<16), xds.WithClientShare(1<<16, 1<<16))
	if err != nil {
		return err
	}
	defer cp.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	out.printf("addr %s", lis.Addr())
	go func() {
		<-ctx.Done()
		_ = cp.Close()
	}()
	return cp.Serve(ctx, lis)
}

// watchADS opens an ADS stream on a connection of its own to the control
// plane at addr, asking for the endpoints of service, and acknowledges
// every response until ctx ends (wg counts its goroutine). Each response
// is decoded into a view: its first full list closes ready, and each
// later difference goes to m as observer id.
func watchADS(b *testing.B, ctx context.Context, wg *sync.WaitGroup, addr, id, service string, expect int, m *matcher, ready *sync.WaitGroup) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err == nil {
		err = ask(st, id, service, nil)
	}
	if err != nil {
		b.Fatal(err)
	}
	ready.Add(1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		v := &view{expect: expect}
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			at := time.Now()
			for _, r := range resp.GetResources() {
				var cla endpointv3.ClusterLoadAssignment
				if proto.Unmarshal(r.GetValue(), &cla) != nil || cla.GetClusterName() != service {
					continue
				}
				diffs, isReady := v.update(claView(&cla))
				if isReady {
					ready.Done()
				}
				for _, d := range diffs {
					m.saw(id, d, at)
				}
			}
			if ask(st, "", service, resp) != nil {
				return
			}
		}
	}()
}

// ask asks for service's endpoints on st: first as node (acked nil), then
// acknowledging each response.
func ask(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, node, service string, acked *discoveryv3.DiscoveryResponse) error {
	req := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{service}}
	if acked == nil {
		req.Node = &corev3.Node{Id: node}
	} else {
		req.VersionInfo, req.ResponseNonce = acked.GetVersionInfo(), acked.GetNonce()
	}
	return st.Send(req)
}

// claView is an assignment as a view: weight by address, 0 for a
// draining endpoint.
func claView(cla *endpointv3.ClusterLoadAssignment) map[string]int {
	v := map[string]int{}
	for _, loc := range cla.GetEndpoints() {
		for _, ep := range loc.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			addr := net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
			w := int(ep.GetLoadBalancingWeight().GetValue())
			if ep.GetHealthStatus() == corev3.HealthStatus_DRAINING {
				w = 0
			}
			v[addr] = w
		}
	}
	return v
}
