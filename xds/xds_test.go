package xds_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/internal/xdsbootstrap"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is one embedded etcd, a registrar, a discovery and a control plane
// serving ADS on a loopback port.
type env struct {
	c      *etcdtest.Cluster
	cli    *clientv3.Client
	reg    *etcd.Registrar
	disc   *etcd.Discovery
	cp     *xds.Server
	addr   string // the control plane's address
	stopCP func() // closes cp and waits for its Serve
}

func newEnv(t *testing.T, opts ...xds.Option) *env {
	t.Helper()
	c := etcdtest.Start(t)
	e := &env{c: c, cli: c.Client(t)}
	var err error
	if e.reg, err = etcd.NewRegistrar(e.cli, etcdopts.Registrar()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.reg.Close() })
	if e.disc, err = etcd.NewDiscovery(e.cli, etcdopts.Discovery()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.disc.Close() })
	e.startControlPlane(t, opts...)
	return e
}

// startControlPlane starts a control plane on e.addr (a new loopback port
// if empty). Its Close is registered as a cleanup and returned.
func (e *env) startControlPlane(t *testing.T, opts ...xds.Option) (stop func()) {
	t.Helper()
	cp := newChecked(t, e.disc, append([]xds.Option{xds.WithLogger(testLogger(t))}, opts...)...)
	addr := e.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	e.cp, e.addr = cp, lis.Addr().String()
	e.stopCP = func() { stop() }
	done := make(chan error, 1)
	go func() { done <- cp.Serve(context.Background(), lis) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := cp.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := <-done; err != xds.ErrClosed && err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// newChecked returns xds.New(d, opts...) with the self-check on: every
// resource it publishes is checked against every client's preconditions,
// and a breach fails t when the test ends (its detail logged through the
// options' logger). Every test's control plane goes through it.
func newChecked(t testing.TB, d registry.Discovery, opts ...xds.Option) *xds.Server {
	t.Helper()
	cp, err := xds.New(d, append(opts, xds.WithSelfCheck())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := cp.Stats().SelfCheckViolations; n > 0 {
			t.Errorf("the control plane published %d resources breaking an xDS client's precondition (logged)", n)
		}
	})
	return cp
}

// testLogger logs warnings and errors through t, so that a NACK's detail
// shows in a failing test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// register registers be as instance id of service.
func (e *env) register(t *testing.T, service, id, addr, zone string, weight int, draining bool) {
	t.Helper()
	in := registry.Instance{Name: service, ID: id, Addr: addr, Zone: zone, Weight: weight, Draining: draining, Version: "v1"}
	if err := e.reg.Register(ctxFor(t, 10*time.Second), in); err != nil {
		t.Fatalf("register %s/%s: %v", service, id, err)
	}
}

// registerIn registers an instance in a region and zone.
func (e *env) registerIn(t *testing.T, service, id, addr, region, zone string) {
	t.Helper()
	in := registry.Instance{Name: service, ID: id, Addr: addr, Region: region, Zone: zone, Version: "v1"}
	if err := e.reg.Register(ctxFor(t, 10*time.Second), in); err != nil {
		t.Fatalf("register %s/%s: %v", service, id, err)
	}
}

func (e *env) deregister(t *testing.T, service, id string) {
	t.Helper()
	if err := e.reg.Deregister(ctxFor(t, 10*time.Second), service, id); err != nil {
		t.Fatalf("deregister %s/%s: %v", service, id, err)
	}
}

// bootstrap is the bootstrap muster xds-bootstrap writes for a client
// with node nodeID in zone of the control plane at addr.
func bootstrap(addr, nodeID, zone string) string {
	return bootstrapIn(addr, nodeID, "", zone)
}

// bootstrapIn is bootstrap for a node in a region and zone.
func bootstrapIn(addr, nodeID, region, zone string) string {
	return bootstrapOf(xdsbootstrap.Config{Servers: []string{addr}, NodeID: nodeID, Region: region, Zone: zone})
}

// bootstrapOf is the bootstrap muster xds-bootstrap writes for c (the
// command prints xdsbootstrap.Marshal's output), so that every client of
// these tests reads the command's own output.
func bootstrapOf(c xdsbootstrap.Config) string {
	b, err := xdsbootstrap.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("bootstrap %+v: %v", c, err)) // the tests' configs are valid
	}
	return string(b)
}

// dial opens an in-process grpc-go xDS channel to xds:///service, as a
// client with node nodeID in zone.
func (e *env) dial(t *testing.T, service, nodeID, zone string) *grpc.ClientConn {
	t.Helper()
	return dialWith(t, e.xdsResolver(t, nodeID, zone), service)
}

// xdsResolver returns an xDS resolver builder of its own. grpc-go 1.85's
// testing builder makes a new xDS client pool on every Build, so each
// channel built with it has an xDS client and an ADS stream of its own;
// what one ADS stream of several services gets is tested on a raw stream
// (TestOneChangeOnePushOnOneStream).
func (e *env) xdsResolver(t *testing.T, nodeID, zone string) grpcresolver.Builder {
	t.Helper()
	b, err := xdsResolverFor(bootstrap(e.addr, nodeID, zone))
	if err != nil {
		t.Fatalf("xDS resolver: %v", err)
	}
	return b
}

// xdsResolverFor returns an xDS resolver builder on the bootstrap boot.
func xdsResolverFor(boot string) (grpcresolver.Builder, error) {
	return grpcxds.NewXDSResolverWithConfigForTesting([]byte(boot))
}

func dialWith(t testing.TB, b grpcresolver.Builder, service string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("xds:///"+service, grpc.WithResolvers(b),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// callUntil makes calls until cond holds on the per-address counts of
// successful calls, failing after 15 s (gRPC's xDS watch timeout).
func callUntil(t *testing.T, conn grpc.ClientConnInterface, what string, cond func(map[string]int) bool) map[string]int {
	t.Helper()
	return testbackend.CallUntil(t, conn, 15*time.Second, what, cond)
}

// calls makes n calls and fails the test on the first error.
func calls(t *testing.T, conn grpc.ClientConnInterface, n int) map[string]int {
	t.Helper()
	return testbackend.Calls(t, conn, n)
}

func hasAll(addrs ...string) func(map[string]int) bool { return testbackend.HasAll(addrs...) }

// missUntil calls until n calls in a row went elsewhere than addr and
// returns when addr got its last call (the zero time if none).
func missUntil(t *testing.T, conn grpc.ClientConnInterface, addr string, n int) time.Time {
	t.Helper()
	var last time.Time
	miss := 0
	callUntil(t, conn, fmt.Sprintf("%d calls in a row not to %s", n, addr), func(c map[string]int) bool {
		if c[addr] > 0 {
			last, miss = time.Now(), 0
			delete(c, addr)
		} else if len(c) > 0 {
			miss++
			clear(c)
		}
		return miss >= n
	})
	return last
}

func noNACK(t *testing.T, cp *xds.Server) {
	t.Helper()
	st := cp.Stats()
	if st.NACKs != 0 {
		t.Errorf("the control plane recorded %d NACKs (see the log)", st.NACKs)
	}
	if st.ACKs == 0 {
		t.Errorf("no ACK recorded: %+v", st)
	}
}

// Traffic through an xDS channel follows register, deregister and drain.
func TestFollowsRegistry(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b, c := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	conn := e.dial(t, "greeter", "client-1", "")
	callUntil(t, conn, "calling a and b", hasAll(a.Addr, b.Addr))

	e.register(t, "greeter", "c", c.Addr, "", 0, false)
	callUntil(t, conn, "calling c after its registration", hasAll(c.Addr))

	e.deregister(t, "greeter", "a")
	missUntil(t, conn, a.Addr, 50)
	if got := calls(t, conn, 200); got[a.Addr] != 0 || got[b.Addr] == 0 || got[c.Addr] == 0 {
		t.Fatalf("after deregistering a: %v, want b and c only", got)
	}

	drainedAt := time.Now()
	e.register(t, "greeter", "b", b.Addr, "", 0, true)
	last := missUntil(t, conn, b.Addr, 100)
	if d := last.Sub(drainedAt); d > 2*time.Second {
		t.Errorf("drained b got calls for %v after the drain, want < 2s", d)
	}
	if got := calls(t, conn, 200); got[b.Addr] != 0 || got[c.Addr] != 200 {
		t.Fatalf("after draining b: %v, want c only", got)
	}
	t.Logf("drained instance's last call %v after the drain", max(last.Sub(drainedAt), 0))
	noNACK(t, e.cp)
}

// Calls with distinct keys (x-muster-key, color.WithKey) spread by
// instance weight under a RingHash cluster.
//
// Tolerance: ±9 percentage points on each share over 4,000 calls. A share
// p deviates by its binomial standard deviation, at most 0.8 points, and by
// the ring's: grpc-go's default ring (1,024 entries) gives an endpoint k =
// 1,024·p entries, whose share of the hash space is off by about
// 1/sqrt(k) of itself, 2.2 points for the 50 % share (k = 512) and 1.6 for
// the 25 % ones. Combined, 9 points are 3.8 standard deviations of the
// largest, independent of the machine's load. Round robin (no weights)
// would give the 50 % share 33 %, off by 17 points.
func TestWeights(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.RingHash, "greeter"))
	a, b, c := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 100, false)
	e.register(t, "greeter", "b", b.Addr, "", 100, false)
	e.register(t, "greeter", "c", c.Addr, "", 200, false)
	conn := &keyed{ClientConnInterface: e.dial(t, "greeter", "client-1", "")}
	callUntil(t, conn, "calling a, b and c", hasAll(a.Addr, b.Addr, c.Addr))

	checkShares(t, calls(t, conn, 4000), []share{{a.Addr, 0.25}, {b.Addr, 0.25}, {c.Addr, 0.50}}, 0.09)
	noNACK(t, e.cp)
}

// share is the share of the calls an address should get.
type share struct {
	addr string
	want float64
}

// sharesWithin reports whether each address's share of got is its want ±
// tol, and describes the shares.
func sharesWithin(got map[string]int, wants []share, tol float64) (bool, string) {
	n := 0
	for _, c := range got {
		n += c
	}
	ok, desc := n > 0, ""
	for _, w := range wants {
		sh := float64(got[w.addr]) / float64(max(n, 1))
		desc += fmt.Sprintf(" %s %.1f %% (want %.1f %%);", w.addr, 100*sh, 100*w.want)
		ok = ok && sh >= w.want-tol && sh <= w.want+tol
	}
	return ok, fmt.Sprintf("%d calls:%s", n, desc)
}

// checkShares fails t unless each address's share of got is its want ±
// tol, and logs the shares.
func checkShares(t *testing.T, got map[string]int, wants []share, tol float64) {
	t.Helper()
	ok, desc := sharesWithin(got, wants, tol)
	t.Logf("tolerance ±%.0f points; %s", 100*tol, desc)
	if !ok {
		t.Errorf("shares out of tolerance (±%.0f points): %s", 100*tol, desc)
	}
}

// A client prefers its zone and fails over to the others when its zone
// empties; a client without a zone uses every zone.
func TestZones(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b, c := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "z1", 0, false)
	e.register(t, "greeter", "b", b.Addr, "z2", 0, false)
	e.register(t, "greeter", "c", c.Addr, "z2", 0, false)
	z1 := e.dial(t, "greeter", "client-z1", "z1")
	all := e.dial(t, "greeter", "client-nozone", "")

	callUntil(t, z1, "calling a from z1", hasAll(a.Addr))
	if got := calls(t, z1, 200); got[a.Addr] != 200 {
		t.Fatalf("client in z1: %v, want all calls to a (z1)", got)
	}
	callUntil(t, all, "calling every zone from a client without a zone", hasAll(a.Addr, b.Addr, c.Addr))

	e.deregister(t, "greeter", "a")
	callUntil(t, z1, "failing over from empty z1 to b and c", hasAll(b.Addr, c.Addr))
	if got := calls(t, z1, 200); got[b.Addr]+got[c.Addr] != 200 {
		t.Fatalf("client in z1 after z1 emptied: %v, want b and c", got)
	}

	e.register(t, "greeter", "a", a.Addr, "z1", 0, false)
	missUntil(t, z1, b.Addr, 100)
	if got := calls(t, z1, 200); got[a.Addr] != 200 {
		t.Fatalf("client in z1 after a came back: %v, want all calls to a", got)
	}
	noNACK(t, e.cp)
}

func TestZonesInStats(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a := testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "z1", 0, false)
	callUntil(t, e.dial(t, "greeter", "client-z1", "z1"), "calling a", hasAll(a.Addr))
	callUntil(t, e.dial(t, "greeter", "client-z2", "z2"), "calling a", hasAll(a.Addr))
	if got := fmt.Sprint(e.cp.Stats().Zones); got != "[z1 z2]" {
		t.Errorf("Zones = %s, want [z1 z2]", got)
	}
}

// A call to a service the registry does not have fails with an error
// naming it once grpc-go's 15 s watch timeout ends, not later. grpc-go
// treats the absence of a never-received Listener from a response as
// inconclusive (the response may answer an earlier request) and relies on
// that timeout, so the control plane cannot make it faster.
func TestUnknownService(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	conn := e.dial(t, "nosuch", "client-1", "")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := testbackend.Call(ctx, conn)
	took := time.Since(start)
	t.Logf("call to an unknown service: %v after %v", err, took)
	// The message depends on which of grpc-go's goroutines reports
	// first: the resource error naming the service, or the empty state
	// that follows it ("produced zero addresses").
	if status.Code(err) != codes.Unavailable {
		t.Errorf("call error %v, want Unavailable", err)
	}
	if took > 18*time.Second {
		t.Errorf("the call failed after %v, want at gRPC's 15 s watch timeout", took)
	}
}

// Instances xDS cannot carry (the address of another instance: grpc-go
// NACKs a whole assignment with a duplicate address; a DNS name: grpc-js
// NACKs a whole assignment with one) are left out and counted, the rest is
// published and accepted by the client.
func TestBadInstanceSkipped(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b, c := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	_, cPort, _ := net.SplitHostPort(c.Addr)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "a-again", a.Addr, "", 0, false) // skipped: "a" comes first by ID
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	e.register(t, "greeter", "c", "localhost:"+cPort, "", 0, false) // skipped: a DNS name
	conn := e.dial(t, "greeter", "client-1", "")
	callUntil(t, conn, "calling a and b", hasAll(a.Addr, b.Addr))
	if got := calls(t, conn, 100); got[c.Addr] != 0 {
		t.Errorf("calls %v: the instance with a DNS name was called", got)
	}
	st := e.cp.Stats()
	if st.Skipped != 2 {
		t.Errorf("Skipped = %d, want 2 (the duplicate and the DNS name)", st.Skipped)
	}
	noNACK(t, e.cp)
}

// Stats counts the connected clients.
func TestStatsClients(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a := testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	c1 := e.dial(t, "greeter", "client-1", "")
	c2 := e.dial(t, "greeter", "client-2", "z1")
	callUntil(t, c1, "calling a", hasAll(a.Addr))
	callUntil(t, c2, "calling a", hasAll(a.Addr))
	waitStats(t, e.cp, "two clients", func(st xds.Stats) bool { return st.Clients == 2 })
	_ = c1.Close()
	_ = c2.Close()
	st := waitStats(t, e.cp, "no client once both channels closed", func(st xds.Stats) bool { return st.Clients == 0 })
	if st.Requests < st.ACKs || st.ACKs < 8 {
		t.Errorf("requests %d, ACKs %d: want at least 4 ACKs per client (one per resource type)", st.Requests, st.ACKs)
	}
}
