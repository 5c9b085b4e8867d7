package xds_test

// Several control planes: replicas of the control plane as child processes
// of this test binary over one etcd, clients whose bootstrap names every
// replica through one server URI, and SIGKILL of the replica they use.

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/musterhq/muster/internal/testkit/dnstest"
	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/proctest"
	"github.com/musterhq/muster/internal/xdsbootstrap"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// controlPlaneEnv makes the test binary a control plane (TestMain): its
// value is the etcd endpoints, comma-separated, a space, and the address
// to serve ADS on.
const controlPlaneEnv = "MUSTER_XDS_TEST_CONTROL_PLANE"

// runControlPlane is the child's main: a control plane publishing greeter
// from the etcd of spec, on the address of spec. It prints "serving ADDR"
// once it listens, then "clients N" (its open ADS streams) every 50 ms,
// with "violations N" when its self-check found resources breaking a
// client's precondition (each logged on its stderr), and exits when its
// stdin closes; the test ends it with SIGKILL.
func runControlPlane(spec string) int {
	endpoints, listen, ok := strings.Cut(spec, " ")
	if !ok {
		fmt.Fprintf(os.Stderr, "%s=%q: want ENDPOINTS ADDR\n", controlPlaneEnv, spec)
		return 2
	}
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "control plane: %s: %v\n", what, err)
		return 1
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fail("etcd client", err)
	}
	disc, err := etcd.NewDiscovery(cli, etcdopts.Discovery()...)
	if err != nil {
		return fail("discovery", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cp, err := xds.New(disc, xds.WithServices("greeter"), xds.WithLogger(logger), xds.WithSelfCheck())
	if err != nil {
		return fail("xds.New", err)
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fail("listen", err)
	}
	served := make(chan error, 1)
	go func() { served <- cp.Serve(context.Background(), lis) }()
	fmt.Printf("serving %s\n", lis.Addr())
	stdin := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString(0) // until EOF: the parent is gone
		close(stdin)
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			st := cp.Stats()
			fmt.Printf("clients %d\n", st.Clients)
			if st.SelfCheckViolations > 0 {
				fmt.Printf("violations %d\n", st.SelfCheckViolations)
			}
		case err := <-served:
			return fail("serve", err)
		case <-stdin:
			return 0
		}
	}
}

// replica is a control plane running as a child process.
type replica struct {
	name, addr string
	cmd        *exec.Cmd
	clients    atomic.Int64  // its open ADS streams, as it last reported
	violations atomic.Int64  // its self-check's breaches, as it last reported
	exited     chan struct{} // closed when its output ends
}

// startReplica runs a control plane on addr over the etcd at endpoints,
// and returns once it serves ADS (failing t after 20 s).
func startReplica(t *testing.T, name, addr string, endpoints []string) *replica {
	t.Helper()
	r := &replica{name: name, addr: addr, exited: make(chan struct{})}
	r.cmd = exec.Command(os.Args[0], "-test.run=^$")
	r.cmd.Env = append(os.Environ(), controlPlaneEnv+"="+strings.Join(endpoints, ",")+" "+addr)
	r.cmd.SysProcAttr = proctest.SysProcAttr()
	r.cmd.Stderr = tWriter{t}
	stdin, err := r.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start control plane %s: %v", name, err)
	}
	serving := make(chan struct{})
	go func() {
		defer close(r.exited)
		sc := bufio.NewScanner(out)
		first := true
		for sc.Scan() {
			line := sc.Text()
			if n, ok := strings.CutPrefix(line, "clients "); ok {
				v, _ := strconv.ParseInt(n, 10, 64)
				r.clients.Store(v)
			}
			if n, ok := strings.CutPrefix(line, "violations "); ok {
				v, _ := strconv.ParseInt(n, 10, 64)
				r.violations.Store(v)
			}
			if first && strings.HasPrefix(line, "serving ") {
				first = false
				close(serving)
			}
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = r.cmd.Process.Kill()
		<-r.exited
		_ = r.cmd.Wait()
		if n := r.violations.Load(); n > 0 {
			t.Errorf("control plane %s published %d resources breaking an xDS client's precondition (logged)", name, n)
		}
	})
	select {
	case <-serving:
	case <-r.exited:
		t.Fatalf("control plane %s exited before serving", name)
	case <-time.After(20 * time.Second):
		t.Fatalf("control plane %s did not serve within 20s", name)
	}
	return r
}

// kill ends the replica with SIGKILL and waits until it is gone.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %s: %v", r.name, err)
	}
	<-r.exited
	_ = r.cmd.Wait()
	r.clients.Store(0)
}

// waitStreams waits until the replicas report n open ADS streams between
// them, failing t after within.
func waitStreams(t *testing.T, n int64, within time.Duration, replicas ...*replica) {
	t.Helper()
	sum := func() (s int64) {
		for _, r := range replicas {
			s += r.clients.Load()
		}
		return s
	}
	t0 := time.Now()
	for sum() != n {
		if time.Since(t0) > within {
			t.Fatalf("the control planes have %d ADS streams after %v, want %d", sum(), within, n)
		}
		time.Sleep(20 * time.Millisecond) // their reports come every 50 ms
	}
}

// tally reads every call of a client as it is made: the failures after
// its first success, and when each backend got its first call.
type tally struct {
	c    *childClient
	done chan struct{}

	mu      sync.Mutex
	calls   int
	failed  int
	failure clientCall // the first failure
	served  bool
	first   map[string]time.Time // a backend's first call
}

func newTally(c *childClient) *tally {
	tl := &tally{c: c, done: make(chan struct{}), first: map[string]time.Time{}}
	go func() {
		defer close(tl.done)
		for call := range c.calls {
			tl.mu.Lock()
			tl.calls++
			switch {
			case call.OK:
				tl.served = true
				if _, ok := tl.first[call.By]; !ok {
					tl.first[call.By] = time.Now()
				}
			case tl.served:
				if tl.failed == 0 {
					tl.failure = call
				}
				tl.failed++
			}
			tl.mu.Unlock()
		}
	}()
	return tl
}

// reached returns when the client's first call to addr was made, and
// whether it was.
func (tl *tally) reached(addr string) (time.Time, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	at, ok := tl.first[addr]
	return at, ok
}

// counts returns the calls made and failed so far.
func (tl *tally) counts() (calls, failed int, failure clientCall) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.calls, tl.failed, tl.failure
}

// waitReached waits until every client has called addr, failing t after
// within; it returns how long after since each got there.
func waitReached(t *testing.T, tallies []*tally, addr string, since time.Time, within time.Duration) []time.Duration {
	t.Helper()
	out := make([]time.Duration, len(tallies))
	for i, tl := range tallies {
		for {
			if at, ok := tl.reached(addr); ok {
				out[i] = at.Sub(since)
				break
			}
			if time.Since(since) > within {
				t.Fatalf("%s has not called %s %v after its registration (stderr:\n%s)", tl.c.name, addr, within, tl.c.stderr)
			}
			time.Sleep(10 * time.Millisecond) // calls come every callEvery; no event to await across processes
		}
	}
	return out
}

// replicaRegistry starts an etcd and a registrar on it, and returns the
// etcd and a function registering greeter instance id at addr, which
// returns when the registration is written.
func replicaRegistry(t *testing.T) (*etcdtest.Cluster, func(id, addr string) time.Time) {
	t.Helper()
	c := etcdtest.Start(t)
	reg, err := etcd.NewRegistrar(c.Client(t), etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return c, func(id, addr string) time.Time {
		t.Helper()
		in := registry.Instance{Name: "greeter", ID: id, Addr: addr, Version: "v1"}
		if err := reg.Register(ctxFor(t, 10*time.Second), in); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
		return time.Now()
	}
}

// The deployment of docs/XDS.md, "Running several control planes": two
// control planes over one etcd, and Go, Node and Python clients calling
// throughout, each with a bootstrap naming both through one server URI
// (grpc-go: a DNS name with an address per replica; grpc-js and C-core:
// the ipv4: list muster xds-bootstrap --form list writes), each at the
// newest version and the support floor. SIGKILL of the replica they all
// use costs no call, and a registration made after the kill reaches every
// client within 5 s; the killed replica's return takes no client back;
// then SIGKILL of the other: the same.
func TestSeveralControlPlanes(t *testing.T) {
	c, register := replicaRegistry(t)

	// The two replicas share a port on two loopback addresses, as two
	// hosts behind one DNS name would.
	var ports proctest.Ports
	port, err := ports.Pick("") // every address: both replicas' port
	if err != nil {
		t.Fatal(err)
	}
	ports.Release()
	addrA := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	addrB := net.JoinHostPort("127.0.0.2", strconv.Itoa(port))
	a := startReplica(t, "A", addrA, c.Endpoints())
	b := startReplica(t, "B", addrB, c.Endpoints())

	dns := dnstest.Start(t)
	dns.Set("cp.muster.test", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	// The DNS name's bootstraps name the test's DNS server, not the
	// system's resolver: the server URI's authority.
	name := fmt.Sprintf("cp.muster.test:%d", port)
	byName := func(nodeID string) string {
		return strings.Replace(bootstrap(name, nodeID, ""), strconv.Quote(name), strconv.Quote("dns://"+dns.Addr()+"/"+name), 1)
	}
	byList := func(nodeID string) string {
		return bootstrapOf(xdsbootstrap.Config{Servers: []string{addrA, addrB}, Form: xdsbootstrap.FormList, NodeID: nodeID})
	}

	first := startGreeter(t)
	register("g0", first.Addr)
	const every = 10 * time.Millisecond
	// The clients of the matrix, newest and floor: grpc-go by the DNS
	// name, grpc-js and C-core by the list.
	clients := []*childClient{
		goInProcess(t, byName("go-1"), every, nil),
		goFloorProcess(t, byName("go-floor-1"), every, nil),
		nodeClient(nodeClientDir)(t, byList("node-1"), every, nil),
		nodeClient(nodeClientFloorDir)(t, byList("node-floor-1"), every, nil),
		pythonClient(t, byList("python-1"), every, nil),
	}
	clients[3].name = "the floor's Node client"
	tallies := make([]*tally, len(clients))
	for i, cl := range clients {
		tallies[i] = newTally(cl)
	}
	waitReached(t, tallies, first.Addr, time.Now(), 30*time.Second)
	// Each client takes the first address its URI names that answers: A,
	// unless A was slow to (grpc-go tries the next address after 250 ms).
	// The second kill finds every client on one replica either way.
	waitStreams(t, int64(len(clients)), 10*time.Second, a, b)
	t.Logf("%d clients on A, %d on B", a.clients.Load(), b.clients.Load())

	// reach is the bound between a registration and every client's first
	// call to the new instance: 5 s, the deployment's promise. A client's
	// ADS stream breaks at the kill, and it reconnects at once (C-core and
	// grpc-js after a backoff of about a second) to the next address; the
	// surviving replica has followed etcd all along.
	const reach = 5 * time.Second
	n := 0
	killAndRegister := func(dead, alive *replica) {
		t.Helper()
		killed := time.Now()
		dead.kill(t)
		n++
		g := startGreeter(t)
		at := register(fmt.Sprintf("g%d", n), g.Addr)
		took := waitReached(t, tallies, g.Addr, at, reach)
		waitStreams(t, int64(len(clients)), 10*time.Second, alive)
		t.Logf("SIGKILL %s: a registration %v after it reached the clients (go, go-floor, node, node-floor, python) in %v; all %d clients on %s by %v after the kill",
			dead.name, at.Sub(killed).Round(time.Millisecond), rounded(took), len(clients), alive.name, time.Since(killed).Round(10*time.Millisecond))
	}

	killAndRegister(a, b)

	// A returns: every client stays on B (its channel has no reason to
	// move), and a registration reaches them through B.
	a = startReplica(t, "A", addrA, c.Endpoints())
	back := time.Now()
	n++
	g := startGreeter(t)
	at := register(fmt.Sprintf("g%d", n), g.Addr)
	took := waitReached(t, tallies, g.Addr, at, reach)
	for time.Since(back) < 2*time.Second {
		if a.clients.Load() != 0 {
			t.Fatalf("%d clients moved back to A within %v of its return", a.clients.Load(), time.Since(back))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("A back: no client moved to it in 2s (B has %d); a registration reached them in %v", b.clients.Load(), rounded(took))

	killAndRegister(b, a)

	for _, tl := range tallies {
		calls, failed, failure := tl.counts()
		t.Logf("%s: %d calls, %d failed", tl.c.name, calls, failed)
		if failed > 0 {
			t.Errorf("%s: %d of %d calls failed; first: %+v", tl.c.name, failed, calls, failure)
		}
	}
}

func rounded(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// bootstrapServers is the bootstrap of muster xds-bootstrap --form
// fallback: one xds_servers entry per address, in order (gRFC A71).
func bootstrapServers(nodeID string, addrs ...string) string {
	return bootstrapOf(xdsbootstrap.Config{Servers: addrs, Form: xdsbootstrap.FormFallback, NodeID: nodeID})
}

// The fallback form (several xds_servers, gRFC A71) with grpc-go, the one
// client here that implements it: a client that starts while the first
// server is down starts from the second, and moves back to the first when
// it returns; but a client that has every resource cached stays with the
// first while it is down, calling on what it has and getting no change.
// That is why docs/XDS.md gives every client one URI naming all replicas.
func TestFallbackForm(t *testing.T) {
	c, register := replicaRegistry(t)
	var ports proctest.Ports
	pa, err := ports.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pb, err := ports.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ports.Release()
	addrA, addrB := net.JoinHostPort("127.0.0.1", strconv.Itoa(pa)), net.JoinHostPort("127.0.0.1", strconv.Itoa(pb))
	a := startReplica(t, "A", addrA, c.Endpoints())
	b := startReplica(t, "B", addrB, c.Endpoints())
	a.kill(t)

	g0 := startGreeter(t)
	register("g0", g0.Addr)
	tl := newTally(goInProcess(t, bootstrapServers("go-1", addrA, addrB), 10*time.Millisecond, nil))
	waitReached(t, []*tally{tl}, g0.Addr, time.Now(), 30*time.Second)
	waitStreams(t, 1, 10*time.Second, b)
	t.Logf("started with A down: served through B")

	a = startReplica(t, "A", addrA, c.Endpoints())
	back := time.Now()
	// Its retries back off (grpc-go: from 1 s, by 1.6, with jitter): a
	// minute covers the backoff after the seconds A was down.
	waitStreams(t, 1, time.Minute, a)
	// It has moved once A's first response is in: it then closes its
	// stream to B.
	waitStreams(t, 0, 10*time.Second, b)
	t.Logf("A back: the client moved to it after %v", time.Since(back).Round(10*time.Millisecond))

	a.kill(t)
	g1 := startGreeter(t)
	at := register("g1", g1.Addr)
	for time.Since(at) < 5*time.Second {
		if _, ok := tl.reached(g1.Addr); ok {
			t.Fatalf("a registration reached the client %v after its primary died: grpc-go now falls back with every resource cached; update docs/XDS.md, \"Running several control planes\"",
				time.Since(at).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond) // calls come every 10 ms
	}
	t.Logf("A killed: a registration had not reached the client 5s later; B has %d clients", b.clients.Load())
	calls, failed, failure := tl.counts()
	t.Logf("%d calls, %d failed", calls, failed)
	if failed > 0 {
		t.Errorf("%d of %d calls failed; first: %+v", failed, calls, failure)
	}
}
