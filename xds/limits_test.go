package xds_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/xds"
)

// refusedWith sends req on a new stream of c and returns the status the
// stream ends with, failing t if it ends otherwise or not within 10 s.
func refusedWith(t *testing.T, c discoveryv3.AggregatedDiscoveryServiceClient, req *discoveryv3.DiscoveryRequest) *status.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := c.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The server may end the stream before the request is sent: Send then
	// returns io.EOF, and Recv returns the status the stream ended with.
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return status.Convert(err)
		}
	}
}

// A request that breaks a bound ends its stream with ResourceExhausted
// naming the bound, is counted, and leaves nothing behind; a request at
// the bounds is served. Each fails with the check removed: the stream is
// served (and holds what it sent).
func TestRequestBounds(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	e.register(t, "greeter", "a", testbackend.Start(t).Addr, "", 0, false)
	waitStats(t, e.cp, "greeter published", func(st xds.Stats) bool { return st.Services == 1 })
	c := adsClient(t, e.addr)
	names := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%0*d", size, i)
		}
		return out
	}
	for _, tc := range []struct {
		what string
		req  *discoveryv3.DiscoveryRequest
		want string
	}{
		{"a node ID of 2 KiB", &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: strings.Repeat("n", 2048)},
			TypeUrl: resourcev3.ListenerType, ResourceNames: []string{"greeter"}}, "node ID of 2048 bytes, more than 1024"},
		{"1,500 names", &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "hostile"},
			TypeUrl: resourcev3.ListenerType, ResourceNames: names(1500, 8)}, "a request for 1500 resources"},
		{"a name of 2 KiB", &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "hostile"},
			TypeUrl: resourcev3.ListenerType, ResourceNames: names(1, 2048)}, "of 2048 bytes, more than 1024"},
		{"a request of 1 MiB", &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "hostile", Cluster: strings.Repeat("c", 1<<20)},
			TypeUrl: resourcev3.ListenerType, ResourceNames: []string{"greeter"}}, "larger than max"},
	} {
		st := refusedWith(t, c, tc.req)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("%s: the stream ended with %v, want ResourceExhausted saying %q", tc.what, st, tc.want)
		}
	}
	got := waitStats(t, e.cp, "no stream left open", func(st xds.Stats) bool { return st.Clients == 0 })
	if got.Refused != 3 { // the 1 MiB request is refused by gRPC before the control plane reads it
		t.Errorf("Refused = %d, want 3", got.Refused)
	}
	if cs := e.cp.Clients(); len(cs) != 0 {
		t.Errorf("refused streams left in the client table: %+v", cs)
	}
	// At the bounds: served.
	stream := adsStream(t, e.addr)
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: strings.Repeat("n", 1024)},
		TypeUrl: resourcev3.ListenerType, ResourceNames: append(names(999, 100), "greeter")}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || len(resp.GetResources()) != 1 {
		t.Fatalf("a request at the bounds: %v, %v; want greeter's listener", resp, err)
	}
}

// A connection opens at most 16 streams at once: the 17th waits.
func TestStreamsPerConnection(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	c := adsClient(t, e.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 16 {
		s, err := c.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		if err := s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "many"}, TypeUrl: resourcev3.ListenerType}); err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, e.cp, "16 streams open", func(st xds.Stats) bool { return st.Clients == 16 })
	// The 17th waits for a place: it does not open within the bound.
	wait, cancelWait := context.WithTimeout(ctx, time.Second)
	defer cancelWait()
	s, err := c.StreamAggregatedResources(wait)
	if err == nil {
		err = s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "many"}, TypeUrl: resourcev3.ListenerType})
		if err == nil {
			_, err = s.Recv()
		}
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a 17th stream on one connection: %v, want it to wait (DeadlineExceeded)", err)
	}
	if st := e.cp.Stats(); st.Clients != 16 {
		t.Errorf("Clients = %d, want 16", st.Clients)
	}
}

// WithMaxStreams and WithMaxConnections bound the streams and connections
// served at once; what is beyond them is refused at once and counted.
func TestMaxStreamsAndConnections(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	e.stopCP()
	e.startControlPlane(t, xds.WithServices("greeter"), xds.WithMaxStreams(2), xds.WithMaxConnections(3))
	c := adsClient(t, e.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 {
		s, err := c.StreamAggregatedResources(ctx)
		if err == nil {
			err = s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "two"}, TypeUrl: resourcev3.ListenerType})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, e.cp, "2 streams open", func(st xds.Stats) bool { return st.Clients == 2 })
	st := refusedWith(t, c, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "third"}, TypeUrl: resourcev3.ListenerType})
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "2 streams are open") {
		t.Errorf("a third stream: %v, want ResourceExhausted naming the bound", st)
	}
	// Connections: the one above and two more are served; a fourth is
	// closed at once.
	var conns []*grpc.ClientConn
	for i := range 3 {
		conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		t.Cleanup(func() { _ = conn.Close() })
		conn.Connect()
		if i < 2 {
			waitReady(t, conn)
		}
	}
	waitStats(t, e.cp, "a connection beyond 3 refused", func(st xds.Stats) bool { return st.RefusedConnections >= 1 })
	if got := e.cp.Stats(); got.Refused != 1 {
		t.Errorf("Refused = %d, want 1", got.Refused)
	}
	_ = conns
}

// waitReady waits until conn is READY, failing after 10 s.
func waitReady(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s.String() != "READY"; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("connection not READY within 10 s: %v", s)
		}
	}
}

// A client that NACKs every response with a huge error cannot flood the
// log: each line is clipped, and after a burst at most one NACK line a
// second is logged; every NACK is counted, and the next line logged says
// how many it follows.
func TestNACKLogBounded(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, xds.WithServices("greeter"))
	e.stopCP()
	e.startControlPlane(t, xds.WithServices("greeter"),
		xds.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	e.register(t, "greeter", "a", testbackend.Start(t).Addr, "", 0, false)
	waitStats(t, e.cp, "greeter published", func(st xds.Stats) bool { return st.Services == 1 })
	stream := adsStream(t, e.addr)
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: strings.Repeat("n", 1000)},
		TypeUrl: resourcev3.ListenerType, ResourceNames: []string{"greeter"}}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	const nacks = 50
	for range nacks {
		req.ResponseNonce = resp.GetNonce()
		req.ErrorDetail = &statuspb.Status{Code: 3, Message: strings.Repeat("x", 100<<10)}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	st := waitStats(t, e.cp, "every NACK counted", func(st xds.Stats) bool { return st.NACKs == nacks })
	lines := strings.Count(logs.String(), "client rejected a response")
	t.Logf("%d NACKs of 100 KiB: %d lines, %d bytes logged, %d suppressed", nacks, lines, len(logs.String()), st.SuppressedLogs)
	if lines > 12 || st.SuppressedLogs < nacks-12 {
		t.Errorf("%d NACK lines logged and %d suppressed, want at most the burst (10) and a line a second", lines, st.SuppressedLogs)
	}
	if n := len(logs.String()); n > 12*4096 {
		t.Errorf("%d bytes logged for %d NACKs, want each line clipped (at most 4 KiB)", n, lines)
	}
}

// The attack a review measured (40 streams, each with a node ID of 1 MB or
// 1,500 names of 2 KB: the heap from 17 MB to 855 MB) is refused stream by
// stream: while the 40 streams are still open, the heap is within 32 MB of
// where it was (without the bounds the control plane holds every request:
// 40 streams of 1 to 3 MB), and the control plane serves a real client.
func TestHostileStreamsLeaveTheHeapBounded(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a := testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	heap := func() uint64 {
		// Twice: buffers pooled by gRPC (sync.Pool) go at the second.
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	names := make([]string, 1500)
	for i := range names {
		names[i] = fmt.Sprintf("%02048d", i)
	}
	bigID := strings.Repeat("h", 1<<20)
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := heap()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.StreamAggregatedResources(ctx)
			if err != nil {
				return
			}
			req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "hostile"}, TypeUrl: resourcev3.ClusterType, ResourceNames: names}
			if i%2 == 0 {
				req = &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: bigID}, TypeUrl: resourcev3.ListenerType}
			}
			_ = s.Send(req)
			// Refused streams end at once; a stream the control plane
			// took holds what it sent until the test ends it.
			recvd := make(chan struct{})
			go func() {
				defer close(recvd)
				for {
					if _, err := s.Recv(); err != nil {
						return
					}
				}
			}()
			select {
			case <-recvd:
			case <-time.After(2 * time.Second): // bound: a held stream
			}
		}()
	}
	wg.Wait()
	during := heap()
	t.Logf("heap %.1f MB before, %.1f MB with 40 hostile streams sent", float64(before)/1e6, float64(during)/1e6)
	if during > before+32<<20 {
		t.Errorf("the heap grew by %.1f MB, want less than 32 MB", float64(during-before)/1e6)
	}
	cancel()
	callUntil(t, e.dial(t, "greeter", "real", ""), "a real client calling a", hasAll(a.Addr))
}
