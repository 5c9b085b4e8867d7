package xds_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
	"github.com/musterhq/muster/xds"
)

// The balancers the convergence benchmark ends its channels with: each
// records when its channel's balancer first got a list of n endpoints, and
// dials nothing (so that connection attempts add no noise). One name per
// path, so that each path's channel reports to its own recorder.
const (
	recorderXDS    = "muster_bench_recorder_xds"
	recorderMuster = "muster_bench_recorder_muster"
)

var (
	recordersMu sync.Mutex
	recorders   = map[string]*registrytest.Arrivals{}
)

func init() {
	balancer.Register(recorderBuilder{name: recorderXDS})
	balancer.Register(recorderBuilder{name: recorderMuster})
}

type recorderBuilder struct{ name string }

func (rb recorderBuilder) Name() string { return rb.name }

func (rb recorderBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	recordersMu.Lock()
	seen := recorders[rb.name]
	recordersMu.Unlock()
	cc.UpdateState(balancer.State{ConnectivityState: connectivity.Connecting, Picker: base.NewErrPicker(balancer.ErrNoSubConnAvailable)})
	return &recorder{seen: seen}
}

type recorder struct{ seen *registrytest.Arrivals }

func (r *recorder) UpdateClientConnState(s balancer.ClientConnState) error {
	if r.seen != nil {
		r.seen.Mark(len(s.ResolverState.Endpoints), time.Now())
	}
	return nil
}
func (r *recorder) ResolverError(error)                                        {}
func (r *recorder) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (r *recorder) Close()                                                     {}
func (r *recorder) ExitIdle()                                                  {}

func recordTo(name string) *registrytest.Arrivals {
	a := registrytest.NewArrivals()
	recordersMu.Lock()
	recorders[name] = a
	recordersMu.Unlock()
	return a
}

// BenchmarkConvergence measures, on the same registrations, the time from
// Registrar.Register to the balancer of a gRPC channel having the new
// endpoint, through two paths side by side:
//
//   - xds: an in-process grpc-go xDS client (xds:///bench) of a control
//     plane that follows the registry with a Discovery of its own;
//   - muster: a muster:///bench channel over Muster's resolver with a
//     Discovery of its own (its own etcd client), as a Go client importing
//     Muster has.
//
// Both channels end in a recording balancer (the xDS cluster names it with
// a custom policy), so the two measure the same hop. A third path, ads, is
// a raw ADS stream of the same control plane receiving the assignment: the
// control plane's share of the xds path. The service grows by one instance
// per iteration. Run with -benchtime 300x or more.
func BenchmarkConvergence(b *testing.B) {
	reg, newDisc := benchRegistry(b)
	cpDisc, clientDisc := newDisc(), newDisc()

	cp, addr := serveBench(b, cpDisc, xds.WithServices("bench"), xds.WithLBPolicy(xds.CustomLBPolicy(recorderXDS)))
	_ = cp
	ctx := context.Background()
	if err := reg.Register(ctx, registry.Instance{Name: "bench", ID: "000000", Addr: "127.0.0.1:19999"}); err != nil {
		b.Fatal(err)
	}

	seenXDS, seenMuster := recordTo(recorderXDS), recordTo(recorderMuster)
	xb, err := newResolver(bootstrap(addr, "bench-client", ""))
	if err != nil {
		b.Fatal(err)
	}
	openBench(b, "xds:///bench", grpc.WithResolvers(xb))
	openBench(b, "muster:///bench", grpc.WithResolvers(resolver.NewBuilder(clientDisc, resolver.WithLogger(quiet))),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+recorderMuster+`":{}}]}`), grpc.WithDisableServiceConfig())
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	raw := watchEDS(b, sctx, &wg, addr, "bench-raw")
	seenXDS.Wait(b, 1)
	seenMuster.Wait(b, 1)
	raw.Wait(b, 1)

	var latXDS, latMuster, latRaw []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		in := registry.Instance{Name: "bench", ID: fmt.Sprintf("%06d", i+1), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
		if err := reg.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
		latXDS = append(latXDS, seenXDS.Wait(b, i+2).Sub(start))
		latMuster = append(latMuster, seenMuster.Wait(b, i+2).Sub(start))
		latRaw = append(latRaw, raw.Wait(b, i+2).Sub(start))
	}
	b.StopTimer()
	x50, m50 := registrytest.Percentile(latXDS, 0.5), registrytest.Percentile(latMuster, 0.5)
	b.ReportMetric(registrytest.Micros(x50), "xds-p50-µs")
	b.ReportMetric(registrytest.Micros(registrytest.Percentile(latXDS, 0.99)), "xds-p99-µs")
	b.ReportMetric(registrytest.Micros(m50), "muster-p50-µs")
	b.ReportMetric(registrytest.Micros(registrytest.Percentile(latMuster, 0.99)), "muster-p99-µs")
	b.ReportMetric(registrytest.Micros(registrytest.Percentile(latRaw, 0.5)), "ads-p50-µs")
	b.ReportMetric(registrytest.Micros(registrytest.Percentile(latRaw, 0.99)), "ads-p99-µs")
	b.ReportMetric(float64(x50)/float64(m50), "xds/muster-p50")
	b.ReportMetric(0, "ns/op")
}

// benchRegistry starts an embedded etcd and a Registrar on it, and returns
// the Registrar and a function that returns a new Discovery of it (with an
// etcd client of its own, as another process has); all are closed at b's
// end.
func benchRegistry(b *testing.B) (*etcd.Registrar, func() *etcd.Discovery) {
	c := etcdtest.Start(b)
	reg, err := etcd.NewRegistrar(c.Client(b), etcd.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = reg.Close() })
	return reg, func() *etcd.Discovery {
		d, err := etcd.NewDiscovery(c.Client(b), etcd.WithLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = d.Close() })
		return d
	}
}

// serveBench starts a control plane over d on a loopback port, stopped at
// b's end. Its clients all come from 127.0.0.1, as many client processes
// would from many hosts: one client may hold every connection and stream.
func serveBench(b *testing.B, d registry.Discovery, opts ...xds.Option) (*xds.Server, string) {
	cp, err := xds.New(d, append([]xds.Option{xds.WithLogger(quiet), xds.WithMaxConnections(4096), xds.WithClientShare(4096, 4096)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	addr := listenBench(b, func(lis net.Listener) { _ = cp.Serve(context.Background(), lis) }, func() { _ = cp.Close() })
	return cp, addr
}

// listenBench runs serve on a listener of a free loopback port until the
// benchmark ends (stop makes serve return), and returns the address.
func listenBench(b *testing.B, serve func(net.Listener), stop func()) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(lis)
	}()
	b.Cleanup(func() {
		stop()
		<-done
	})
	return lis.Addr().String()
}

func openBench(b *testing.B, target string, opts ...grpc.DialOption) {
	conn, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	conn.Connect()
}

// BenchmarkADSFanOut opens N state-of-the-world ADS streams (each on its
// own connection, as N client processes would) watching one service's
// endpoints, then makes one registration per iteration and waits until
// every stream has received it (each stream counts the endpoints of every
// assignment, to know which change it carries, and acknowledges it).
// It reports the time from Register to a stream's response (p50 and p99
// over all streams and iterations) and to the last stream's (p50 and p99
// over iterations), the process CPU per change (control plane, the N
// in-process clients receiving and acknowledging, etcd), and the heap and
// goroutines per stream (both ends of the stream: client and server).
func BenchmarkADSFanOut(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) { benchFanOut(b, n, false) })
	}
}

// BenchmarkADSAdmission is BenchmarkADSFanOut through the Server's
// admission (Serve: the connection and stream shares, the first-request
// deadline, the bounds and the subscription budget) and, as the anchor,
// through go-control-plane's ADS server over the same cache with none of
// it (plain), one after the other in the same run (-count repeats each).
func BenchmarkADSAdmission(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("streams=%d/admission", n), func(b *testing.B) { benchFanOut(b, n, false) })
		b.Run(fmt.Sprintf("streams=%d/plain", n), func(b *testing.B) { benchFanOut(b, n, true) })
	}
}

// servePlain serves xds.PlainADS(cp) on a grpc.Server of its own, without
// the Server's limits, and returns its address.
func servePlain(b *testing.B, cp *xds.Server) string {
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, xds.PlainADS(cp))
	return listenBench(b, func(lis net.Listener) { _ = g.Serve(lis) }, g.Stop)
}

// watchEDS opens an ADS stream on a connection of its own to the control
// plane at addr, as node, watching the endpoints of service bench; it
// decodes and acknowledges every response until ctx ends (wg counts its
// goroutine). The result records when the stream first received an
// assignment of each size (number of endpoints).
func watchEDS(b *testing.B, ctx context.Context, wg *sync.WaitGroup, addr, node string) *registrytest.Arrivals {
	s := registrytest.NewArrivals()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		b.Fatal(err)
	}
	req := &discoveryv3.DiscoveryRequest{
		Node: &corev3.Node{Id: node}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"bench"},
	}
	if err := st.Send(req); err != nil {
		b.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			now := time.Now()
			if len(resp.GetResources()) == 1 {
				s.Mark(countEndpoints(resp.GetResources()[0].GetValue()), now)
			}
			if err := st.Send(&discoveryv3.DiscoveryRequest{
				TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"bench"},
				VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
			}); err != nil {
				return
			}
		}
	}()
	return s
}

// countEndpoints counts the lb_endpoints of a serialized
// ClusterLoadAssignment without decoding them (a client's decoding of the
// endpoints' metadata would dominate the benchmark's CPU).
func countEndpoints(b []byte) int {
	n := 0
	forEachField(b, func(num protowire.Number, v []byte) {
		if num == 2 { // endpoints: LocalityLbEndpoints
			forEachField(v, func(num protowire.Number, _ []byte) {
				if num == 2 { // lb_endpoints
					n++
				}
			})
		}
	})
	return n
}

// forEachField calls f with each length-delimited field of the message b.
func forEachField(b []byte, f func(protowire.Number, []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return
			}
			f(num, v)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return
		}
		b = b[n:]
	}
}

// benchFanOut is BenchmarkADSFanOut with n streams, served by the Server
// or, when plain, by servePlain.
func benchFanOut(b *testing.B, n int, plain bool) {
	reg, newDisc := benchRegistry(b)
	disc := newDisc()
	cp, addr := serveBench(b, disc, xds.WithServices("bench"))
	if plain {
		addr = servePlain(b, cp)
	}
	ctx := context.Background()
	if err := reg.Register(ctx, registry.Instance{Name: "bench", ID: "000000", Addr: "127.0.0.1:19999"}); err != nil {
		b.Fatal(err)
	}
	for cp.Stats().Services == 0 {
		time.Sleep(time.Millisecond) // polling a counter during setup
	}

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()

	streams := make([]*registrytest.Arrivals, n)
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	for i := range streams {
		streams[i] = watchEDS(b, sctx, &wg, addr, fmt.Sprintf("bench-%d", i))
	}
	// waitAll returns when each stream first had size endpoints.
	waitAll := func(size int) []time.Time {
		out := make([]time.Time, n)
		for i, s := range streams {
			out[i] = s.Wait(b, size)
		}
		return out
	}
	waitAll(1)
	for !plain && cp.Stats().ACKs < uint64(n) { // the plain server counts none
		time.Sleep(time.Millisecond) // polling a counter during setup
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perStream := float64(after.HeapInuse-before.HeapInuse) / float64(n)
	goroutinesPer := float64(runtime.NumGoroutine()-goroutinesBefore) / float64(n)

	var each, last []time.Duration
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cpu0 := processCPU()
		start := time.Now()
		in := registry.Instance{Name: "bench", ID: fmt.Sprintf("%06d", i+1), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)}
		if err := reg.Register(ctx, in); err != nil {
			b.Fatal(err)
		}
		var worst time.Duration
		for _, at := range waitAll(i + 2) {
			d := at.Sub(start)
			each = append(each, d)
			worst = max(worst, d)
		}
		last = append(last, worst)
		cpu += processCPU() - cpu0
	}
	b.StopTimer()
	b.ReportMetric(registrytest.Micros(registrytest.Percentile(each, 0.5)), "stream-p50-µs")
	b.ReportMetric(registrytest.Micros(registrytest.Percentile(each, 0.99)), "stream-p99-µs")
	b.ReportMetric(registrytest.Micros(registrytest.Percentile(last, 0.5)), "all-p50-µs")
	b.ReportMetric(registrytest.Micros(registrytest.Percentile(last, 0.99)), "all-p99-µs")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/change")
	b.ReportMetric(perStream/1024, "heap-KiB/stream")
	b.ReportMetric(goroutinesPer, "goroutines/stream")
	b.ReportMetric(0, "ns/op")
}
