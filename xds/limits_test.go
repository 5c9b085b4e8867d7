package xds_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
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
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

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
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "at most 2 streams are held at once") {
		t.Errorf("a third stream: %v, want ResourceExhausted naming the bound", st)
	}
	// Connections: the one above and two more are served; a fourth is
	// closed at once. (They come from 127.0.0.2: 127.0.0.1 has places
	// beyond the bound, TestLoopbackConnectionPlaces.)
	for i := range 3 {
		conn := clientFrom(t, e.addr, "127.0.0.2", insecure.NewCredentials())
		conn.Connect()
		if i < 2 {
			waitReady(t, conn)
		}
	}
	waitStats(t, e.cp, "a connection beyond 3 refused", func(st xds.Stats) bool { return st.RefusedConnections >= 1 })
	if got := e.cp.Stats(); got.Refused != 1 || got.Connections != 3 {
		t.Errorf("Refused = %d, Connections = %d; want 1 and 3", got.Refused, got.Connections)
	}
}

// A client at 127.0.0.1 (the host's own: a local gRPC process, a health
// check) is served while other addresses hold every connection's place and
// a newcomer from another is refused: it takes one of the places beyond
// the bound kept for the host's own clients. Without them it is refused
// like the newcomer.
func TestLoopbackConnectionPlaces(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	e.stopCP()
	e.startControlPlane(t, xds.WithServices("greeter"), xds.WithMaxConnections(4), xds.WithClientShare(2, 16))
	for _, src := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"} {
		conn := clientFrom(t, e.addr, src, insecure.NewCredentials())
		conn.Connect()
		waitReady(t, conn)
	}
	clientFrom(t, e.addr, "127.0.0.4", insecure.NewCredentials()).Connect()
	waitStats(t, e.cp, "every place held, a newcomer refused", func(st xds.Stats) bool {
		return st.Connections == 4 && st.RefusedConnections >= 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := answered(ctx, clientFrom(t, e.addr, "127.0.0.1", insecure.NewCredentials())); err != nil {
		t.Fatalf("a client at 127.0.0.1 while others hold every place: %v, want served", err)
	}
	if st := e.cp.Stats(); st.Connections != 5 {
		t.Errorf("Connections = %d, want 5: the bound and one place beyond it", st.Connections)
	}
}

// One client may hold its share of connections and of streams
// (WithClientShare), whatever the bounds for all: beyond it, its
// connection is closed at once and its stream refused, while a client from
// another address is served. A stream takes its place with its first
// request.
func TestClientShare(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	e.stopCP()
	e.startControlPlane(t, xds.WithServices("greeter"), xds.WithClientShare(2, 3))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	from := func(src string) *grpc.ClientConn { return clientFrom(t, e.addr, src, insecure.NewCredentials()) }
	// Streams: 3 served to 127.0.0.1 (a silent one takes no place), a
	// 4th refused; 127.0.0.2 served.
	c := discoveryv3.NewAggregatedDiscoveryServiceClient(from("127.0.0.1"))
	if _, err := c.StreamAggregatedResources(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s, err := c.StreamAggregatedResources(ctx)
		if err == nil {
			err = s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "one"}, TypeUrl: resourcev3.ListenerType})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, e.cp, "3 streams served", func(st xds.Stats) bool { return st.Clients == 3 })
	st := refusedWith(t, c, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "one"}, TypeUrl: resourcev3.ListenerType})
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "one client may hold at most 3 streams") {
		t.Errorf("a 4th stream of one client: %v, want ResourceExhausted naming its share", st)
	}
	other := discoveryv3.NewAggregatedDiscoveryServiceClient(from("127.0.0.2"))
	s, err := other.StreamAggregatedResources(ctx)
	if err == nil {
		err = s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "two"}, TypeUrl: resourcev3.ListenerType})
	}
	if err != nil {
		t.Fatal(err)
	}
	waitStats(t, e.cp, "another client's stream served", func(st xds.Stats) bool { return st.Clients == 4 })

	// Connections: 127.0.0.1 holds 2 (the one above and one more); a
	// third is closed at once.
	extra := from("127.0.0.1")
	extra.Connect()
	waitReady(t, extra)
	before := e.cp.Stats().RefusedConnections
	from("127.0.0.1").Connect()
	waitStats(t, e.cp, "a third connection of one client refused", func(st xds.Stats) bool { return st.RefusedConnections > before })
}

// clientFrom returns a client connection to addr with creds, its TCP
// connections from the loopback address src; it is closed at the test's
// end.
func clientFrom(t *testing.T, addr, src string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			return d.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// answered opens an ADS stream on conn, asks for listeners and returns
// nil once an answer came, or the error that ended the stream.
func answered(ctx context.Context, conn *grpc.ClientConn) error {
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err == nil {
		err = stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "answered"}, TypeUrl: resourcev3.ListenerType})
	}
	if err == nil {
		_, err = stream.Recv()
	}
	return err
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
	before := heapAlloc()
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
	during := heapAlloc()
	t.Logf("heap %.1f MB before, %.1f MB with 40 hostile streams sent", float64(before)/1e6, float64(during)/1e6)
	if during > before+32<<20 {
		t.Errorf("the heap grew by %.1f MB, want less than 32 MB", float64(during-before)/1e6)
	}
	cancel()
	callUntil(t, e.dial(t, "greeter", "real", ""), "a real client calling a", hasAll(a.Addr))
}

// heapAlloc returns the bytes of live heap objects after a collection.
func heapAlloc() uint64 {
	// Twice: buffers pooled by gRPC (sync.Pool) go at the second.
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Requests each within every bound, on many streams, make the control
// plane hold no more than its subscription budget allows: 64 streams, each
// with a node of 100 KiB of metadata and then 1,000 names of 120 bytes for
// each of three more types (each request under 128 KiB), hold what 8 MiB
// of budget counts (the streams past it end with ResourceExhausted naming
// the budget), the heap grows by less than three times the budget, and a
// client asking for one service is served. Without the budget the 64
// streams hold about 60 MB of subscriptions.
func TestSubscriptionBudget(t *testing.T) {
	const budget = 8 << 20
	e := newEnv(t, xds.WithServices("greeter"))
	e.stopCP()
	e.startControlPlane(t, xds.WithServices("greeter"), xds.WithSubscriptionBudget(budget))
	a := testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	waitStats(t, e.cp, "greeter published", func(st xds.Stats) bool { return st.Services == 1 })
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("%0120d", i)
	}
	meta, err := structpb.NewStruct(map[string]any{"pad": strings.Repeat("m", 100<<10)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := heapAlloc()
	var (
		streams []discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
		c       discoveryv3.AggregatedDiscoveryServiceClient
	)
	for i := range 64 {
		if i%16 == 0 { // 16 streams a connection
			c = adsClient(t, e.addr)
		}
		s, err := c.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reqs := []*discoveryv3.DiscoveryRequest{{Node: &corev3.Node{Id: fmt.Sprintf("big-%d", i), Metadata: meta}, TypeUrl: resourcev3.ListenerType}}
		for _, typeURL := range []string{resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType} {
			reqs = append(reqs, &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
		}
		for _, req := range reqs {
			if err := s.Send(req); err != nil {
				break // refused: the stream has ended
			}
		}
		streams = append(streams, s)
	}
	st := waitStats(t, e.cp, "every big request served or refused", func(st xds.Stats) bool {
		return st.Refused+uint64(st.Clients) >= 64 && st.Requests >= 64+3*uint64(st.Clients)
	})
	during := heapAlloc()
	t.Logf("64 streams at the bounds: %d served, %d refused, %d KiB counted; heap %.1f → %.1f MB",
		st.Clients, st.Refused, st.SubscriptionBytes>>10, float64(before)/1e6, float64(during)/1e6)
	if st.SubscriptionBytes > budget {
		t.Errorf("the subscriptions are counted for %d bytes, more than the budget (%d)", st.SubscriptionBytes, budget)
	}
	if st.Refused < 32 {
		t.Errorf("%d of 64 streams refused, want the budget to refuse all but about 14", st.Refused)
	}
	if grew := int64(during) - int64(before); grew > 3*budget {
		t.Errorf("the heap grew by %.1f MB with the budget at %.1f MB", float64(grew)/1e6, float64(budget)/1e6)
	}
	// The last stream came when the budget was spent.
	err = nil
	for err == nil {
		_, err = streams[63].Recv() // its Listener request may have been answered
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "this control plane keeps for them") {
		t.Errorf("the 64th stream: %v, want ResourceExhausted naming the budget", err)
	}
	cancel()
	callUntil(t, e.dial(t, "greeter", "real", ""), "a real client calling a", hasAll(a.Addr))
}

// A stream keeps of its node only what the control plane uses (ID,
// cluster, locality, user agent): 200 streams whose first request carries
// 100 KiB of node metadata grow the control plane's heap by less than
// 8 MB while they stay open (go-control-plane keeps each stream's node:
// without the trim they hold 20 MB). The clients run in a child process,
// so that their own buffers are not counted.
func TestNodeMetadataNotKept(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	before := heapAlloc()
	stop := startClients(t, clientsSpec{Addr: e.addr, Streams: 200, MetadataKiB: 100})
	defer stop()
	waitStats(t, e.cp, "200 streams served", func(st xds.Stats) bool { return st.Clients == 200 && st.Requests >= 200 })
	during := heapAlloc()
	t.Logf("200 streams with 100 KiB of node metadata: heap %.1f → %.1f MB", float64(before)/1e6, float64(during)/1e6)
	if grew := int64(during) - int64(before); grew > 8<<20 {
		t.Errorf("the heap grew by %.1f MB: the streams keep their nodes' metadata", float64(grew)/1e6)
	}
}

// BenchmarkSubscriptionBudgetAtScale is the attack a review measured at
// full scale (4,096 streams, every request at the bounds: the heap went to
// 4 GB): 4,096 streams from 16 addresses, each with a node of 100 KiB of
// metadata and then 1,000 names of 120 bytes for each of three types,
// against the default budget. It reports the control plane's heap with
// the streams open, and how many were served. The clients run in a child
// process.
func BenchmarkSubscriptionBudgetAtScale(b *testing.B) {
	_, newDisc := benchRegistry(b)
	cp, addr := serveBench(b, newDisc(), xds.WithServices("greeter"))
	for b.Loop() {
		before := heapAlloc()
		stop := startClients(b, clientsSpec{Addr: addr, Streams: 4096, Sources: 16, MetadataKiB: 100, Names: 1000, NameBytes: 120})
		st := cp.Stats()
		for st.Refused+uint64(st.Clients) < 4096 || st.Requests < 4096+3*uint64(st.Clients) {
			time.Sleep(50 * time.Millisecond) // polling a counter
			st = cp.Stats()
		}
		during := heapAlloc()
		stop()
		b.ReportMetric(float64(int64(during)-int64(before))/(1<<20), "heap-MiB")
		b.ReportMetric(float64(st.Clients), "served")
		b.ReportMetric(float64(st.SubscriptionBytes)/(1<<20), "counted-MiB")
	}
}

// clientsSpec is what a child process of startClients opens: Streams ADS
// streams to Addr, 16 a connection, from Sources loopback addresses
// (127.0.5.1 on; 0: the default one); each stream's first request asks
// for greeter's Listener with a node of MetadataKiB of metadata, and, with
// Names, three more requests of Names names of NameBytes each (Route,
// Cluster, Endpoint).
type clientsSpec struct {
	Addr                          string
	Streams, Sources              int
	MetadataKiB, Names, NameBytes int
}

// clientsEnv carries a clientsSpec (JSON) to a child process.
const clientsEnv = "MUSTER_XDS_TEST_CLIENTS"

// startClients runs the clients of spec in a child process and returns
// once every stream has sent its requests; stop ends them.
func startClients(tb testing.TB, spec clientsSpec) (stop func()) {
	tb.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), clientsEnv+"="+string(js))
	stdin, err := child.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		tb.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = stdin.Close() // the child exits when its stdin closes
			_ = child.Wait()
		})
	}
	tb.Cleanup(stop)
	if _, err := io.ReadAll(io.LimitReader(stdout, 1)); err != nil { // "sent"
		tb.Fatal(err)
	}
	return stop
}

// runClients opens the clients of the clientsSpec js, writes one byte to
// stdout once every request is sent, and holds the streams until its
// stdin closes. It returns the process's exit code.
func runClients(js string) int {
	var spec clientsSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	meta, err := structpb.NewStruct(map[string]any{"pad": strings.Repeat("m", spec.MetadataKiB<<10)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	names := make([]string, spec.Names)
	for i := range names {
		names[i] = fmt.Sprintf("%0*d", spec.NameBytes, i)
	}
	var c discoveryv3.AggregatedDiscoveryServiceClient
	for i := range spec.Streams {
		if i%16 == 0 {
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry()}
			if spec.Sources > 0 {
				src := net.IPv4(127, 0, 5, byte(i/16%spec.Sources+1))
				opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
					return d.DialContext(ctx, "tcp", addr)
				}))
			}
			conn, err := grpc.NewClient(spec.Addr, opts...)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer conn.Close()
			c = discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
		}
		s, err := c.StreamAggregatedResources(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		reqs := []*discoveryv3.DiscoveryRequest{{Node: &corev3.Node{Id: fmt.Sprintf("client-%d", i), Metadata: meta},
			TypeUrl: resourcev3.ListenerType, ResourceNames: []string{"greeter"}}}
		if spec.Names > 0 {
			for _, typeURL := range []string{resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType} {
				reqs = append(reqs, &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
			}
		}
		for _, req := range reqs {
			if err := s.Send(req); err != nil {
				break // refused: the stream has ended
			}
		}
	}
	_, _ = os.Stdout.Write([]byte{'\n'})
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// With WithClientIPv4Prefix(24) the addresses of one /24 are one client:
// they share one share of connections, which a lone address would have
// to itself.
func TestClientIPv4Prefix(t *testing.T) {
	if _, err := xds.New(nil, xds.WithClientIPv4Prefix(7)); err == nil || !strings.Contains(err.Error(), "WithClientIPv4Prefix(7)") {
		t.Errorf("WithClientIPv4Prefix(7): %v, want an error naming it", err)
	}
	e := newEnv(t, xds.WithServices("greeter"))
	e.stopCP()
	e.startControlPlane(t, xds.WithServices("greeter"), xds.WithClientShare(2, 3), xds.WithClientIPv4Prefix(24))
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		c := clientFrom(t, e.addr, src, insecure.NewCredentials())
		c.Connect()
		waitReady(t, c)
	}
	before := e.cp.Stats().RefusedConnections
	clientFrom(t, e.addr, "127.0.0.4", insecure.NewCredentials()).Connect()
	waitStats(t, e.cp, "a third address of the /24 refused: its two neighbours hold the share", func(st xds.Stats) bool { return st.RefusedConnections > before })
}
