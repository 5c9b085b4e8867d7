package xds_test

// The conformance matrix: every scenario against every real xDS client
// Muster supports, at the support floor and at the newest version
// (docs/XDS.md, "Clients"). A cell passes when the client does what the
// scenario asks (or, for a feature the client lacks, takes its documented
// fallback) and the control plane recorded no NACK from it. The table of
// what was proved is logged, and written to the file named by
// MUSTER_XDS_MATRIX when it is set (.ci/run prints it).

import (
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// xdsClient is a real xDS client of the matrix: one language's gRPC at one
// version.
type xdsClient struct {
	id      string // the subtest's name: go, go-floor, node, node-floor, python
	name    string // e.g. "Node, @grpc/grpc-js-xds"
	version func(t *testing.T) string
	// start runs the client calling xds:///greeter with the bootstrap
	// boot, every call carrying the metadata pairs md ("name=value", with
	// "{n}" replaced by the call's number).
	start func(t testing.TB, boot string, every time.Duration, md []string) *childClient
	// What the client does with what Muster publishes, where clients
	// differ; every other scenario is the same for all.
	ringHash     string // "" when it runs ring_hash, else what it runs instead and why
	leastRequest string // likewise for least_request
	musterPolicy bool   // runs the balancer a CustomLBPolicy names (Muster's, in this process)
	tls          string // "" when its bootstrap takes tls channel credentials (gRFC A65), else what it takes
	// timeoutWithheld is "" when the client gets the policy's timeout and
	// ends a call at it, else why the control plane withholds it from the
	// client (routeForm formNoTimeout): its calls then run to their own
	// deadline.
	timeoutWithheld string
	// capGap is the least time between the starts of calls for the cap on
	// calls in flight (circuit_breakers) to see the earlier ones; 0 for
	// calls started at once.
	capGap time.Duration
}

func matrixClients() []xdsClient {
	return []xdsClient{
		{id: "go", name: "Go, grpc-go (in process)", version: func(*testing.T) string { return grpc.Version },
			start: goInProcess, musterPolicy: true},
		{id: "go-floor", name: "Go, grpc-go", version: goFloorVersion, start: goFloorProcess,
			leastRequest: "round robin (least_request needs GRPC_EXPERIMENTAL_ENABLE_LEAST_REQUEST=true)",
			tls:          "unsupported: no tls channel_creds (insecure, google_default)"},
		{id: "node", name: "Node, @grpc/grpc-js-xds", version: nodeVersion(nodeClientDir), start: nodeClient(nodeClientDir),
			leastRequest: "round robin (no least_request)",
			tls:          "unsupported: no tls channel_creds (insecure, google_default)",
			capGap:       nodeCapGap},
		{id: "node-floor", name: "Node, @grpc/grpc-js-xds", version: nodeVersion(nodeClientFloorDir), start: nodeClient(nodeClientFloorDir),
			leastRequest: "round robin (no least_request)",
			tls:          "unsupported: no tls channel_creds (insecure, google_default)",
			capGap:       nodeCapGap},
		{id: "python", name: "Python (C-core), grpcio", version: pythonVersion, start: pythonClient,
			ringHash:        "round robin (reads lb_policy only; its ring_hash crashes, grpc/grpc#31766)",
			timeoutWithheld: "withheld from every C-core client: the C-core ends calls 1-2 s early under a service config's timeout (its two clocks, src/core/lib/gprpp/time.cc; grpc/grpc#34547)",
			leastRequest:    "round robin (no least_request)",
			tls:             "unsupported: no tls channel_creds (insecure, google_default, fake)"},
	}
}

// nodeCapGap is the time between the starts of the Node client's calls
// that its cap on calls in flight sees: grpc-js-xds counts a call in flight
// from its start on the connection (xds_cluster_impl's onCallStarted),
// which grpc-js makes after an asynchronous step (the call credentials'
// metadata, load-balancing-call.ts), while it checks the cap at the pick:
// every call picked in one turn of the event loop sees the count before
// any of them. 10 ms leaves that step many turns.
const nodeCapGap = 10 * time.Millisecond

func nodeVersion(dir string) func(t *testing.T) string {
	return func(t *testing.T) string {
		_, abs := requireNodePackages(t, dir)
		b, err := os.ReadFile(filepath.Join(abs, "node_modules", "@grpc", "grpc-js-xds", "package.json"))
		if err != nil {
			t.Fatal(err)
		}
		_, v, _ := strings.Cut(string(b), `"version": "`)
		v, _, _ = strings.Cut(v, `"`)
		return v
	}
}

func pythonVersion(t *testing.T) string {
	requirePythonClient(t)
	out, err := exec.Command(pythonBin, "-c", "import grpc; print(grpc.__version__)").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// scenario is one row of the matrix. run fails t when the client does not
// do what the row asks; it returns what the cell shows ("" for "yes").
type scenario struct {
	name string
	run  func(t *testing.T, cl xdsClient) string
}

func matrixScenarios() []scenario {
	return []scenario{
		{"register, drain, deregister", scenarioFollow},
		{"locality: own zone, then own region, then elsewhere, as each empties", scenarioLocality},
		{"colors: x-muster-color routes, uncolored calls to the base", scenarioColors},
		{"canary: 20 % of uncolored calls, blue calls to blue", scenarioCanary},
		{"colors and canary with zoned instances: blue calls to blue, 20 % of uncolored calls, the client's zone first", scenarioZonedCanary},
		{"ring hash: shares by weight across zones", scenarioRingShares},
		{"ring hash: one key, one backend (x-muster-key, else the channel)", scenarioAffinity},
		{"least_request (round robin where absent)", scenarioLeastRequest},
		{"custom policy muster_p2c (round robin where absent)", scenarioCustomPolicy},
		{"control plane down 3 s, then restarted: no failed call, changes resume", scenarioControlPlaneRestart},
		{"etcd down 10 s: no failed call", scenarioEtcdDown},
		{"an instance at a DNS name skipped, the rest called", scenarioDNSNameSkipped},
		{"TLS to the control plane (tls channel_creds, gRFC A65, client certificate)", scenarioTLS},
		{"call policy, set live: retry on UNAVAILABLE, then a 300 ms timeout", scenarioCallPolicy},
		{"call policy: retry backoff of 1 s, every retried call within its 2 s deadline", scenarioRetryBackoff},
		{"call policy without ejection (the outlier standby): accepted, ejects nothing", scenarioPolicyNoEjection},
		{"call policy: outlier ejection by failure percentage", scenarioPolicyOutlier},
		{"call policy: max concurrent 2, of 6 calls at once 4 fail fast with UNAVAILABLE", scenarioPolicyMaxConcurrent},
		{"call policy: affinity header (ring hash): one key, one backend, across clients", scenarioPolicyAffinity},
	}
}

// TestClientMatrix runs every scenario against every client, each cell on
// its own etcd, control plane and backends. Clients run in parallel with
// each other, a client's scenarios one after another.
func TestClientMatrix(t *testing.T) {
	clients, scenarios := matrixClients(), matrixScenarios()
	var mu sync.Mutex
	cells := map[[2]int]string{}
	versions := make([]string, len(clients))
	t.Run("clients", func(t *testing.T) {
		for ci, cl := range clients {
			t.Run(cl.id, func(t *testing.T) {
				t.Parallel()
				v := cl.version(t)
				mu.Lock()
				versions[ci] = v
				mu.Unlock()
				for si, sc := range scenarios {
					var note string
					ok := t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
						note = sc.run(t, cl)
					})
					mu.Lock()
					switch {
					case !ok:
						cells[[2]int{si, ci}] = "FAILED"
					case note == "":
						cells[[2]int{si, ci}] = "yes"
					default:
						cells[[2]int{si, ci}] = note
					}
					mu.Unlock()
				}
			})
		}
	})
	var b strings.Builder
	b.WriteString("| scenario |")
	for ci, cl := range clients {
		fmt.Fprintf(&b, " %s %s |", cl.name, versions[ci])
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(clients)) + "\n")
	for si, sc := range scenarios {
		fmt.Fprintf(&b, "| %s |", sc.name)
		for ci := range clients {
			c := cells[[2]int{si, ci}]
			if c == "" {
				c = "not run"
			}
			fmt.Fprintf(&b, " %s |", c)
		}
		b.WriteString("\n")
	}
	t.Logf("xDS client matrix (every cell: no NACK):\n%s", b.String())
	if out := os.Getenv("MUSTER_XDS_MATRIX"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Errorf("write the matrix to %s: %v", out, err)
		}
	}
}

// startIn starts cl against e's control plane as node nodeID in zone.
func (cl xdsClient) startIn(t *testing.T, e *env, nodeID, zone string, md ...string) *childClient {
	t.Helper()
	return cl.start(t, bootstrap(e.addr, nodeID, zone), callEvery, md)
}

// noFailures fails t when a call of cs failed after its first success, or
// the control plane recorded a NACK.
func noFailures(t *testing.T, e *env, cs ...*childClient) {
	t.Helper()
	for _, c := range cs {
		if c.failed != 0 {
			t.Errorf("%d calls of %s failed after its first success, the last %+v", c.failed, c.name, c.failure)
		}
	}
	noNACKs(t, e)
}

// noNACKs fails t when the control plane recorded a NACK.
func noNACKs(t *testing.T, e *env) {
	t.Helper()
	if st := e.cp.Stats(); st.NACKs != 0 {
		t.Errorf("the control plane recorded %d NACKs (see the log)", st.NACKs)
	}
}

func scenarioFollow(t *testing.T, cl xdsClient) string {
	testClientFollows(t, func(t *testing.T, addr string) *childClient {
		return cl.start(t, bootstrap(addr, "follow", ""), callEvery, nil)
	})
	return ""
}

// A client in region r1, zone z1 calls a (r1/z1) only; when z1 empties, b
// (r1/z2, its region); when r1 empties, c (r2/z3); when a is back, a only
// again. Empty-list protection is off: the scenario empties two of three
// zones within a minute, as no protection would let through.
func scenarioLocality(t *testing.T, cl xdsClient) string {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithProtection(0, time.Minute))
	a, b, c := startGreeter(t), startGreeter(t), startGreeter(t)
	e.registerIn(t, "greeter", "a", a.Addr, "r1", "z1")
	e.registerIn(t, "greeter", "b", b.Addr, "r1", "z2")
	e.registerIn(t, "greeter", "c", c.Addr, "r2", "z3")
	cc := cl.start(t, bootstrapIn(e.addr, "locality", "r1", "z1"), callEvery, nil)
	cc.until(t, "calling a (r1/z1)", hasAll(a.Addr))
	if got := cc.until(t, "making 100 calls", total(100)); got[a.Addr] != 100 {
		t.Errorf("client in r1/z1: %v, want every call to a (its zone)", got)
	}
	e.deregister(t, "greeter", "a")
	cc.missing(t, a.Addr, 50)
	if got := cc.until(t, "making 100 calls", total(100)); got[b.Addr] != 100 {
		t.Errorf("client in r1/z1 after z1 emptied: %v, want every call to b (r1/z2, its region)", got)
	}
	e.deregister(t, "greeter", "b")
	cc.missing(t, b.Addr, 50)
	if got := cc.until(t, "making 100 calls", total(100)); got[c.Addr] != 100 {
		t.Errorf("client in r1/z1 after r1 emptied: %v, want every call to c (r2/z3)", got)
	}
	e.registerIn(t, "greeter", "a", a.Addr, "r1", "z1")
	cc.missing(t, c.Addr, 50)
	if got := cc.until(t, "making 100 calls", total(100)); got[a.Addr] != 100 {
		t.Errorf("client in r1/z1 after a came back: %v, want every call to a", got)
	}
	noFailures(t, e, cc)
	return ""
}

// Blue calls reach the blue instance only, uncolored ones never.
func scenarioColors(t *testing.T, cl xdsClient) string {
	e := newEnv(t, xds.WithServices("greeter"))
	a, blue := startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.registerColored(t, "greeter", "blue", blue.Addr, "blue")
	blueCl := cl.startIn(t, e, "blue", "", color.Header+"=blue")
	plain := cl.startIn(t, e, "plain", "")
	blueCl.until(t, "calling blue", hasAll(blue.Addr))
	if got := blueCl.until(t, "making 200 blue calls", total(200)); got[blue.Addr] != 200 {
		t.Errorf("blue calls: %v, want all 200 to blue %s", got, blue.Addr)
	}
	plain.until(t, "calling a", hasAll(a.Addr))
	if got := plain.until(t, "making 300 uncolored calls", total(300)); got[blue.Addr] != 0 {
		t.Errorf("uncolored calls: %v, want none to blue %s", got, blue.Addr)
	}
	noNACKs(t, e)
	return ""
}

// A canary of 20 % sends a fifth of the uncolored calls to blue, and blue
// calls of another client all to blue (one service with colors and a
// canary, called with and without the color header). Clients
// draw a weighted cluster at random per call: of n = 1,000 calls the blue
// count is Binomial(1000, 0.2), mean 200, standard deviation 12.6; the
// bound, ±63, is five standard deviations, whatever the machine's load. A
// client that took the weights' total as 100 (grpc-js-xds before 1.14.1
// without total_weight) sends blue nothing; one that drew over the wrong
// total, every call.
func scenarioCanary(t *testing.T, cl xdsClient) string {
	e := newCanaryEnv(t)
	a, blue := startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.registerColored(t, "greeter", "blue", blue.Addr, "blue")
	if err := etcd.SetCanary(ctxFor(t, 10*time.Second), e.cli, "greeter",
		registry.Canary{Color: "blue", Percent: 20}, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	c := cl.startIn(t, e, "canary", "")
	blueCl := cl.startIn(t, e, "canary-blue", "", color.Header+"=blue")
	c.until(t, "calling a and blue", hasAll(a.Addr, blue.Addr))
	got := c.until(t, "making 1,000 uncolored calls", total(1000))
	if n := got[blue.Addr]; n < 137 || n > 263 {
		t.Errorf("1,000 uncolored calls: %v; blue got %d, want 200 ± 63", got, n)
	}
	t.Logf("canary 20 %%: blue got %d of 1,000", got[blue.Addr])
	blueCl.until(t, "calling blue", hasAll(blue.Addr))
	if got := blueCl.until(t, "making 100 blue calls", total(100)); got[blue.Addr] != 100 {
		t.Errorf("blue calls under the canary: %v, want all 100 to blue", got)
	}
	if c.failed+blueCl.failed > 0 {
		// Not a failure of the cell: what routes a call is checked above.
		t.Logf("%d and %d calls failed after the first success; the last %+v, %+v", c.failed, blueCl.failed, c.failure, blueCl.failure)
	}
	noNACKs(t, e)
	return ""
}

// Colors and a canary of 20 % with every instance in a zone, the client in
// r1/z1: base a (r1/z1), b (r1/z2), blue (r1/z1). Blue calls all reach
// blue; of 1,000 uncolored calls blue gets 200 ± 63 (the bound of
// scenarioCanary) and the rest go to a (the client's zone), none to b. A
// client that keyed a color assignment's endpoints by locality alone would
// send blue calls to a: the base's failover copy of r1/z1 (grpc-java did,
// before the copies got a sub_zone of their own).
func scenarioZonedCanary(t *testing.T, cl xdsClient) string {
	e := newCanaryEnv(t)
	a, b, blue := startGreeter(t), startGreeter(t), startGreeter(t)
	e.registerIn(t, "greeter", "a", a.Addr, "r1", "z1")
	e.registerIn(t, "greeter", "b", b.Addr, "r1", "z2")
	in := registry.Instance{Name: "greeter", ID: "blue", Addr: blue.Addr, Region: "r1", Zone: "z1", Version: "v1",
		Metadata: map[string]string{color.DefaultInstanceKey: "blue"}}
	if err := e.reg.Register(ctxFor(t, 10*time.Second), in); err != nil {
		t.Fatal(err)
	}
	if err := etcd.SetCanary(ctxFor(t, 10*time.Second), e.cli, "greeter",
		registry.Canary{Color: "blue", Percent: 20}, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	c := cl.start(t, bootstrapIn(e.addr, "zoned-canary", "r1", "z1"), callEvery, nil)
	blueCl := cl.start(t, bootstrapIn(e.addr, "zoned-blue", "r1", "z1"), callEvery, []string{color.Header + "=blue"})
	c.until(t, "calling a and blue", hasAll(a.Addr, blue.Addr))
	got := c.until(t, "making 1,000 uncolored calls", total(1000))
	if n := got[blue.Addr]; n < 137 || n > 263 || got[b.Addr] != 0 {
		t.Errorf("1,000 uncolored calls from r1/z1: %v; want blue 200 ± 63, the rest to a (r1/z1), none to b (r1/z2)", got)
	}
	blueCl.until(t, "calling blue", hasAll(blue.Addr))
	if got := blueCl.until(t, "making 100 blue calls", total(100)); got[blue.Addr] != 100 {
		t.Errorf("blue calls from r1/z1: %v, want all 100 to blue (r1/z1), none to the base's copy of its locality", got)
	}
	noNACKs(t, e)
	return ""
}

// Under RingHash, calls with distinct keys spread by weight across zones:
// z1 {a:100}, z2 {b:100, c:100} gives each a third (a locality per zone
// gave a client that multiplies locality by endpoint weight 20/40/40).
// Bound: ±10 points over 1,000 calls. A share's binomial standard
// deviation is 1.5 points; the ring (the clients' default minimum, 1,024
// entries) gives an endpoint of k ≈ 341 entries a share of the hash space
// off by about 1/sqrt(k) of itself, 1.8 points; combined 2.4, so 10 points
// are four standard deviations, independent of the machine's load.
func scenarioRingShares(t *testing.T, cl xdsClient) string {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.RingHash))
	a, b, c := startGreeter(t), startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "z1", 100, false)
	e.register(t, "greeter", "b", b.Addr, "z2", 100, false)
	e.register(t, "greeter", "c", c.Addr, "z2", 100, false)
	client := cl.startIn(t, e, "ring", "", color.KeyHeader+"=user-{n}")
	client.until(t, "calling a, b and c", hasAll(a.Addr, b.Addr, c.Addr))
	got := client.until(t, "making 1,000 calls", total(1000))
	ok, desc := sharesWithin(got, []share{{a.Addr, 1.0 / 3}, {b.Addr, 1.0 / 3}, {c.Addr, 1.0 / 3}}, 0.10)
	t.Logf("tolerance ±10 points; %s", desc)
	if !ok {
		t.Errorf("shares out of tolerance: %s", desc)
	}
	noNACKs(t, e)
	return cl.ringHash
}

// Under RingHash, 100 calls with one x-muster-key reach one backend, and
// so do 100 calls of a channel without a key (the channel's hash). A client
// without ring hash (round robin) spreads them; its cell says so.
func scenarioAffinity(t *testing.T, cl xdsClient) string {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.RingHash))
	for _, id := range []string{"a", "b", "c", "d"} {
		e.register(t, "greeter", id, startGreeter(t).Addr, "", 0, false)
	}
	keyed := cl.startIn(t, e, "keyed", "", color.KeyHeader+"=user-7")
	plain := cl.startIn(t, e, "unkeyed", "")
	for _, c := range []*childClient{keyed, plain} {
		waitSteady(t, c)
		got := c.until(t, "making 100 calls", total(100))
		if cl.ringHash != "" {
			if len(got) < 2 {
				t.Errorf("round robin: 100 calls reached %v, want several backends", got)
			}
			continue
		}
		if len(got) != 1 {
			t.Errorf("100 calls of one key (or of one channel without a key): %v, want one backend", got)
		}
	}
	noNACKs(t, e)
	return cl.ringHash
}

// waitSteady reads a ring hash client's calls until 100 in a row reached
// the same backends as the 100 before them (bounded by until's 30 s):
// gRPC's ring hash connects lazily (on a pick, moving to the next entry
// while one connects), so until the backends are READY a key's calls can
// land elsewhere.
func waitSteady(t *testing.T, c *childClient) {
	t.Helper()
	var prev map[string]int
	c.until(t, "calling the same backends for 100 calls in a row", func(m map[string]int) bool {
		if n := totalOf(m); n < 100 {
			return false
		}
		same := prev != nil && len(prev) == len(m)
		for k := range m {
			if _, ok := prev[k]; !ok {
				same = false
			}
		}
		prev = maps.Clone(m)
		clear(m)
		return same
	})
}

func totalOf(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Under LeastRequest every client accepts the Cluster and calls every
// instance (least_request where it has it, round robin elsewhere).
func scenarioLeastRequest(t *testing.T, cl xdsClient) string {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.LeastRequest))
	a, b := startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	c := cl.startIn(t, e, "least-request", "")
	c.until(t, "calling a and b", hasAll(a.Addr, b.Addr))
	noNACKs(t, e)
	return cl.leastRequest
}

// Under MusterP2C a client with Muster's balancer runs it; one without it
// takes the round-robin fallback: about half the calls each.
func scenarioCustomPolicy(t *testing.T, cl xdsClient) string {
	if cl.musterPolicy {
		e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.MusterP2C))
		a, b := startGreeter(t), startGreeter(t)
		e.register(t, "greeter", "a", a.Addr, "", 0, false)
		e.register(t, "greeter", "b", b.Addr, "", 0, false)
		cl.startIn(t, e, "p2c", "").until(t, "calling a and b", hasAll(a.Addr, b.Addr))
		noNACKs(t, e)
		return ""
	}
	testClientFallback(t, func(t *testing.T, addr string) *childClient {
		return cl.start(t, bootstrap(addr, "fallback", ""), callEvery, nil)
	})
	return "round robin (fallback)"
}

// The control plane stops and a new one starts on the same address: the
// client keeps calling (it keeps what it had) with no failed call, and a
// registration after the restart reaches it.
func scenarioControlPlaneRestart(t *testing.T, cl xdsClient) string {
	return outage(t, cl, "the control plane down", 3*time.Second, func(e *env) func() {
		e.stopCP()
		return func() { e.startControlPlane(t, xds.WithServices("greeter")) }
	})
}

// etcd stops for 10 s: the control plane keeps serving its last lists and
// the client keeps calling with no failed call; a registration after etcd
// is back reaches it.
func scenarioEtcdDown(t *testing.T, cl xdsClient) string {
	return outage(t, cl, "etcd down", 10*time.Second, func(e *env) func() {
		m := e.c.Members()[0]
		m.Stop(t)
		return func() { m.Restart(t) }
	})
}

// outage is the shape of the outage scenarios: the client calls a, what
// goes down goes down (down returns how to bring it back) for d of calls,
// comes back, and an instance registered then reaches the client; no call
// fails and no NACK is recorded.
func outage(t *testing.T, cl xdsClient, what string, d time.Duration, down func(*env) (up func())) string {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b := startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	c := cl.startIn(t, e, "outage", "")
	c.until(t, "calling a", hasAll(a.Addr))
	up := down(e)
	deadline := time.Now().Add(d)
	c.until(t, fmt.Sprintf("calling a for %v with %s", d, what), func(map[string]int) bool { return time.Now().After(deadline) })
	up()
	registrytest.RegisterEventually(t, e.reg, registry.Instance{Name: "greeter", ID: "b", Addr: b.Addr, Version: "v1"})
	c.until(t, "calling b, registered after the outage", hasAll(b.Addr))
	noFailures(t, e, c)
	return ""
}

// An instance registered at a DNS name is left out of the assignment
// (grpc-js rejects a whole assignment with one); the client calls the
// others with no failed call.
func scenarioDNSNameSkipped(t *testing.T, cl xdsClient) string {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b := startGreeter(t), startGreeter(t)
	_, port, _ := net.SplitHostPort(b.Addr)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", "localhost:"+port, "", 0, false)
	c := cl.startIn(t, e, "dns-name", "")
	if got := c.until(t, "making 100 calls", total(100)); got[a.Addr] != 100 {
		t.Errorf("100 calls: %v, want all to a", got)
	}
	if c.failed != 0 {
		t.Errorf("%d calls failed", c.failed)
	}
	if st := e.cp.Stats(); st.Skipped != 1 {
		t.Errorf("Skipped = %d, want 1", st.Skipped)
	}
	noNACKs(t, e)
	return ""
}

// With a control plane serving TLS and requiring client certificates, a
// client whose bootstrap has tls channel credentials with a certificate is
// served. A client whose bootstrap has no such credentials cannot reach a
// TLS control plane at all; its cell says what it has (the control plane
// then serves it plaintext, on a trusted network or through a proxy).
func scenarioTLS(t *testing.T, cl xdsClient) string {
	if cl.tls != "" {
		return cl.tls
	}
	f := etcdtest.GenerateTLS(t)
	cfg, err := xds.ServerTLS(f.ServerCertFile, f.ServerKeyFile, f.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, xds.WithServices("greeter"), xds.WithTLS(cfg))
	a := startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	c := cl.start(t, tlsBootstrap(e.addr, f.CAFile, f.CertFile, f.KeyFile), callEvery, nil)
	c.until(t, "calling a through a TLS control plane", hasAll(a.Addr))
	noNACKs(t, e)
	return ""
}

// The service's call policy, set while the client runs: with one of two
// backends failing every call, a retry policy (2 attempts on UNAVAILABLE)
// makes 100 calls in a row succeed, where without it calls failed; then,
// with both backends answering after 1 s (under the client's own 2 s
// deadline), a 300 ms timeout makes 5 calls in a row end with
// DEADLINE_EXCEEDED within 360 ms (the policy's time + 20 %), as the
// client measures them, once it acked the route the policy published. The load of the machine can only lengthen a call:
// 60 ms of slack is what a client scheduled late may take, and a client
// that did not apply the timeout would take 1 s. A client the timeout is
// withheld from (timeoutWithheld) must instead see 5 calls in a row
// succeed after the backends' 1 s: had the timeout reached it, its calls
// would end early, after about 1 ms.
func scenarioCallPolicy(t *testing.T, cl xdsClient) string {
	e, a, b, c := oneBackendFailing(t, cl, "policy")
	e.setPolicy(t, registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"},
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond}})
	if !c.streak(t, 100, 20*time.Second, func(call clientCall) bool { return call.OK }) {
		t.Errorf("20 s after the retry policy, no 100 calls in a row succeeded: no retries")
	}
	a.fail.Store(false)
	a.delay.Store(int64(time.Second))
	b.delay.Store(int64(time.Second))
	e.setPolicyAcked(t, "policy", resourcev3.RouteType, registry.Policy{Timeout: 300 * time.Millisecond})
	if cl.timeoutWithheld != "" {
		var last clientCall
		if !c.streak(t, 5, 30*time.Second, func(call clientCall) bool {
			last = call
			return call.OK && call.MS >= 1000
		}) {
			t.Errorf("30 s after the 300 ms timeout policy, no 5 calls in a row took the backends' 1 s and succeeded: the timeout reached a client it is withheld from; the last %+v", last)
		}
		noNACKs(t, e)
		return "retries yes; timeout 300 ms " + cl.timeoutWithheld + " (its calls keep their own deadline)"
	}
	const deadlineExceeded = 4
	ok, slowest, last := c.streakTimed(t, 5, 20*time.Second, func(call clientCall) bool {
		return !call.OK && call.Code == deadlineExceeded && call.MS <= 360
	})
	if !ok {
		t.Errorf("20 s after the 300 ms timeout policy, no 5 calls in a row ended with DEADLINE_EXCEEDED within 360 ms; the last %+v", last)
	}
	t.Logf("timeout 300 ms: 5 calls in a row DEADLINE_EXCEEDED, the slowest after %.1f ms", slowest)
	noNACKs(t, e)
	return ""
}

// setPolicyAcked sets greeter's call policy p and waits until the client
// named node accepted a new version of typeURL (the resource p is in).
func (e *env) setPolicyAcked(t *testing.T, node, typeURL string, p registry.Policy) {
	t.Helper()
	before := acked(e.cp.Clients(), node, typeURL)
	e.setPolicy(t, p)
	waitClients(t, e.cp, "the client acking the "+typeURL+" published with the policy", func(cs []xds.ClientStatus) bool {
		v := acked(cs, node, typeURL)
		return v != "" && v != before
	})
}

// acked returns the version of typeURL the client named node accepted
// last; "" for none.
func acked(cs []xds.ClientStatus, node, typeURL string) string {
	for _, c := range cs {
		if c.Node != node {
			continue
		}
		for _, ts := range c.Types {
			if ts.TypeURL == typeURL {
				return ts.Acked
			}
		}
	}
	return ""
}

// With both backends answering after 1 s, the client makes 6 calls at
// once: all succeed; then, with a policy capping calls in flight at 2 set
// live, 6 calls at once give 2 successes and 4 UNAVAILABLE within 500 ms
// (as the client measures them), the cap's fast failure: a call that
// waited for a backend would take 1 s, whatever the load.
func scenarioPolicyMaxConcurrent(t *testing.T, cl xdsClient) string {
	e := newPolicyEnv(t)
	a, b := startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	c := cl.startIn(t, e, "max-concurrent", "")
	c.until(t, "calling a and b", hasAll(a.Addr, b.Addr))
	a.delay.Store(int64(time.Second))
	b.delay.Store(int64(time.Second))
	gap := cl.capGap
	if got := burstOutcome(c.burst(t, 6, gap)); got.ok != 6 {
		t.Fatalf("6 calls at once without a cap: %+v, want all 6 to succeed", got)
	}
	set := time.Now()
	e.setPolicy(t, registry.Policy{MaxConcurrent: 2})
	var got outcome
	for {
		if got = burstOutcome(c.burst(t, 6, gap)); got.ok == 2 && got.fast == 4 {
			break
		}
		if time.Since(set) > 20*time.Second {
			t.Fatalf("20 s after the cap of 2, 6 calls at once gave %+v; want 2 successes and 4 UNAVAILABLE within 500 ms", got)
		}
	}
	t.Logf("cap of 2 applied within %v of its write: of 6 calls started %v apart, 4 UNAVAILABLE after at most %.1f ms (%q), 2 served",
		time.Since(set).Round(time.Millisecond), gap, got.slowestFast, got.err)
	noNACKs(t, e)
	if gap > 0 {
		if got := burstOutcome(c.burst(t, 6, 0)); got.ok != 6 {
			t.Errorf("6 calls started at once under the cap of 2 gave %+v; the client caps them now: make its capGap 0 and update docs/POLICY.md", got)
		}
		return fmt.Sprintf("yes, for calls started %v apart (calls started at once all pass)", gap)
	}
	return ""
}

// outcome sums up the calls of a burst.
type outcome struct {
	ok, fast, other int     // served; UNAVAILABLE within 500 ms; anything else
	slowestFast     float64 // ms of the slowest fast failure
	err             string  // the error of a fast failure
}

func burstOutcome(calls []clientCall) outcome {
	const unavailable = 14
	var o outcome
	for _, call := range calls {
		switch {
		case call.OK:
			o.ok++
		case call.Code == unavailable && call.MS < 500:
			o.fast++
			o.slowestFast = max(o.slowestFast, call.MS)
			o.err = call.Error
		default:
			o.other++
		}
	}
	return o
}

// With one of two backends failing every call with UNAVAILABLE, a policy
// retrying UNAVAILABLE once after a backoff of 1 s (base and cap) makes 20
// calls in a row succeed, each within 1.9 s, inside the clients' 2 s
// deadline. A retry waits a random time in [0, 1 s) (gRFC A6); the
// backends answer in microseconds, and 0.9 s is slack for a loaded
// machine. grpc-js-xds reads a backoff of 1 s as 10 s (its routes carry
// 999 ms instead, routeForm): a retried call (about every other one, under
// round robin) would then wait under 1 s with probability 0.1 and
// otherwise end at its deadline, so 20 calls in a row (about ten
// retried) would pass with probability under 10^-7.
func scenarioRetryBackoff(t *testing.T, cl xdsClient) string {
	e, _, _, c := oneBackendFailing(t, cl, "backoff")
	e.setPolicyAcked(t, "backoff", resourcev3.RouteType, registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2,
		Codes: []string{"UNAVAILABLE"}, BackoffBase: time.Second, BackoffMax: time.Second}})
	ok, slowest, last := c.streakTimed(t, 20, time.Minute, func(call clientCall) bool { return call.OK && call.MS < 1900 })
	if !ok {
		t.Errorf("a minute after the retry policy with a 1 s backoff, no 20 calls in a row succeeded within 1.9 s; the last %+v", last)
	} else {
		t.Logf("retry backoff 1 s: 20 calls in a row succeeded, the slowest after %.1f ms", slowest)
	}
	noNACKs(t, e)
	return ""
}

// With one of two backends failing every call, a policy without ejection
// (a cap on calls in flight far above what the client makes) publishes the
// standby outlier_detection (xds/callpolicy.go): a client accepts it (no
// NACK; grpc-java reads its minimum hosts into an int, so it must stay a
// positive one) and it ejects nothing: over 3 s after the client accepted
// the Cluster (three ejection intervals), the failing backend still gets
// at least a quarter of the calls, where round robin gives it half.
func scenarioPolicyNoEjection(t *testing.T, cl xdsClient) string {
	e, _, _, c := oneBackendFailing(t, cl, "standby")
	e.setPolicyAcked(t, "standby", resourcev3.ClusterType, registry.Policy{MaxConcurrent: 1000})
	calls := c.during(t, 3*time.Second)
	failed := 0
	for _, call := range calls {
		if !call.OK {
			failed++
		}
	}
	if len(calls) == 0 || failed*4 < len(calls) {
		t.Errorf("over 3 s under a policy without ejection the failing backend got %d of %d calls, want at least a quarter: the standby ejected it", failed, len(calls))
	}
	t.Logf("over 3 s under the standby: %d of %d calls reached the failing backend", failed, len(calls))
	noNACKs(t, e)
	return ""
}

// With one of two backends failing every call and no retries, a policy of
// failure-percentage ejection (50 %, evaluated every second, a base
// ejection of 10 s) set live takes the failing backend out: 100 calls in a
// row succeed, where without it calls failed; over the next 3 s it gets at
// most 2 % of the calls (its ejection, the first, lasts 10 s from before
// the 100 calls, which take about a second even on a loaded machine: it
// gets none); healed, it is called again once its ejection has ended,
// within the base ejection and two intervals of its healing.
func scenarioPolicyOutlier(t *testing.T, cl xdsClient) string {
	const base = 10 * time.Second
	e, a, b, c := oneBackendFailing(t, cl, "outlier")
	set := time.Now()
	e.setPolicy(t, registry.Policy{Outlier: registry.OutlierPolicy{FailurePercent: 50, BaseEjection: base}})
	if !c.streak(t, 100, 20*time.Second, func(call clientCall) bool { return call.OK && call.By == b.Addr }) {
		t.Fatalf("20 s after the outlier policy, no 100 calls in a row reached the healthy backend: the failing one is not ejected")
	}
	t.Logf("ejected: 100 calls in a row to the healthy backend %v after the policy's write", time.Since(set).Round(time.Millisecond))
	pushedAtEjection := e.cp.Stats().Pushes["greeter"]
	calls := c.during(t, 3*time.Second)
	failed := 0
	for _, call := range calls {
		if !call.OK {
			failed++
		}
	}
	if len(calls) == 0 || failed*50 > len(calls) {
		t.Errorf("over 3 s after the ejection the failing backend got %d of %d calls, want at most 2 %%", failed, len(calls))
	}
	t.Logf("over 3 s after the ejection: %d of %d calls failed", failed, len(calls))
	a.fail.Store(false)
	healed := time.Now()
	c.until(t, "calling the healed backend", hasAll(a.Addr))
	back, ejected := time.Since(healed), time.Since(set)
	t.Logf("healed backend called again %v after it healed, %v after the policy's write (base ejection %v)",
		back.Round(time.Millisecond), ejected.Round(time.Millisecond), base)
	if back > base+2*time.Second {
		t.Errorf("the healed backend was called again %v after it healed, want within %v (the base ejection and two 1 s intervals)", back, base+2*time.Second)
	}
	if ejected < base {
		// What could have ended the ejection early (once under load, for
		// grpc-js-xds): an xDS change the client got after the ejection
		// (an endpoint list without a makes its entry anew), or the
		// registration lost and written again.
		t.Errorf("the healed backend was called again %v after the policy's write, before the base ejection (%v) could end; "+
			"greeter's pushes at the ejection %+v, now %+v; registrar %+v; discovery resyncs %d, rewinds %d",
			ejected, base, pushedAtEjection, e.cp.Stats().Pushes["greeter"], e.reg.Status(), e.disc.Stats().Resyncs, e.disc.Stats().Rewinds)
	}
	noNACKs(t, e)
	return ""
}

// Under ring hash with a policy's affinity header x-user, three clients
// (three channels, so three channel IDs the fallback hash would spread)
// calling with the same x-user value all reach one backend.
func scenarioPolicyAffinity(t *testing.T, cl xdsClient) string {
	e := newPolicyEnv(t)
	e.stopCP()
	ps, err := etcd.NewPolicies(e.cli, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	e.startControlPlane(t, xds.WithServices("greeter"), xds.WithPolicies(ps), xds.WithLBPolicy(xds.RingHash))
	for _, id := range []string{"a", "b", "c", "d"} {
		e.register(t, "greeter", id, startGreeter(t).Addr, "", 0, false)
	}
	e.setPolicy(t, registry.Policy{AffinityHeader: "x-user"})
	seen := map[string]bool{}
	for i := range 3 {
		c := cl.startIn(t, e, fmt.Sprint("affine-", i), "", "x-user=alice")
		waitSteady(t, c)
		got := c.until(t, "making 100 calls", total(100))
		if cl.ringHash != "" {
			continue // round robin: nothing to hash
		}
		if len(got) != 1 {
			t.Errorf("client %d: 100 calls with x-user=alice reached %v, want one backend", i, got)
		}
		for by := range got {
			seen[by] = true
		}
	}
	if cl.ringHash == "" && len(seen) != 1 {
		t.Errorf("three clients with x-user=alice reached %v, want one backend for the key", seen)
	}
	noNACKs(t, e)
	return cl.ringHash
}

// oneBackendFailing starts greeter on a control plane that follows call
// policies, with backends a and b and cl calling it as node, then makes a
// fail every call and checks that some of the client's calls fail (with
// no policy yet).
func oneBackendFailing(t *testing.T, cl xdsClient, node string) (e *env, a, b *greeterBackend, c *childClient) {
	t.Helper()
	e = newPolicyEnv(t)
	a, b = startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	c = cl.startIn(t, e, node, "")
	c.until(t, "calling a and b", hasAll(a.Addr, b.Addr))
	a.fail.Store(true)
	failed := 0
	for _, call := range c.next(t, 40) {
		if !call.OK {
			failed++
		}
	}
	if failed == 0 {
		t.Fatalf("no call failed with a failing backend and no policy; the scenario cannot tell what a policy does")
	}
	return e, a, b, c
}
