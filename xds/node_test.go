package xds_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/demo/greeterpb"
	"github.com/musterhq/muster/xds"
)

// nodeClientDir holds the Node.js client and its package-lock.json; CI runs
// npm ci there before go test, and the test runs it itself when the packages
// are missing.
const nodeClientDir = "testdata/nodeclient"

// greeterBackend is a real gRPC server of the demo Greeter service whose
// replies say which backend answered (served_by = its address), so that a
// client in another language can tell the backends apart.
type greeterBackend struct {
	greeterpb.UnimplementedGreeterServer
	Addr string
}

func (g *greeterBackend) SayHello(_ context.Context, req *greeterpb.HelloRequest) (*greeterpb.HelloReply, error) {
	return &greeterpb.HelloReply{Message: "hello " + req.GetName(), ServedBy: g.Addr}, nil
}

func startGreeter(t *testing.T) *greeterBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &greeterBackend{Addr: lis.Addr().String()}
	srv := grpc.NewServer()
	greeterpb.RegisterGreeterServer(srv, g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return g
}

// requireNodeClient returns the node binary and the client's directory,
// installing the client's pinned packages with npm ci if they are missing.
// It fails the test (never skips it), with the command to run, when Node
// is missing or npm ci fails.
func requireNodeClient(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (Node.js 18 or later) is not on PATH: %v; the Node xDS client test needs it", err)
	}
	if dir, err = filepath.Abs(nodeClientDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@grpc", "grpc-js-xds", "package.json")); err != nil {
		// A fresh clone: install the pinned packages (package-lock.json)
		// once, as .ci/run does, so that the README's test command works.
		t.Logf("installing the Node client's packages: npm ci --prefix %s", dir)
		out, err := exec.Command("npm", "ci", "--prefix", dir, "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			t.Fatalf("the Node client's packages are not installed and npm ci failed (%v):\n%s\nrun\n\tnpm ci --prefix %s", err, out, dir)
		}
	}
	return node, dir
}

// nodeCall is one line of the Node client's output.
type nodeCall struct {
	N     int    `json:"n"`
	OK    bool   `json:"ok"`
	By    string `json:"by"`
	Code  int    `json:"code"`
	Error string `json:"error"`
}

// nodeClient is the Node.js xDS client running as a child process.
type nodeClient struct {
	calls  chan nodeCall
	stderr *lockedBuffer
	failed int // failed calls seen by next, after the first success
	served bool
}

// startNodeClient runs client.js against the control plane at addr with
// node id nodeID, and kills it at the test's end. It fails the test, naming
// the npm command, when the client's dependencies are not installed.
func startNodeClient(t *testing.T, addr, nodeID string) *nodeClient {
	t.Helper()
	node, dir := requireNodeClient(t)
	cmd := exec.Command(node, filepath.Join(dir, "client.js"), "xds:///greeter", "5")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP_CONFIG="+bootstrap(addr, nodeID, ""), "GRPC_XDS_BOOTSTRAP=")
	stdin, err := cmd.StdinPipe() // the client exits when it closes
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &nodeClient{calls: make(chan nodeCall, 1024), stderr: &lockedBuffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(c.calls)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var call nodeCall
			if err := json.Unmarshal(sc.Bytes(), &call); err != nil {
				c.stderr.WriteString(fmt.Sprintf("unparsable output line %q: %v\n", sc.Text(), err))
				continue
			}
			c.calls <- call
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		exited := make(chan error, 1)
		go func() {
			// Drain what is left so the reader (and so Wait) can end.
			for range c.calls {
			}
			<-read
			exited <- cmd.Wait()
		}()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the Node client did not exit within 5s of its stdin closing; killed")
		}
	})
	return c
}

// until reads the client's calls until cond holds on the per-backend
// counts of successful calls, failing after 30 s. Failed calls after the
// first success are counted in c.failed.
func (c *nodeClient) until(t *testing.T, what string, cond func(map[string]int) bool) map[string]int {
	t.Helper()
	counts := map[string]int{}
	timeout := time.After(30 * time.Second)
	var last nodeCall
	for !cond(counts) {
		select {
		case call, ok := <-c.calls:
			if !ok {
				t.Fatalf("the Node client exited before %s; stderr:\n%s", what, c.stderr)
			}
			last = call
			if !call.OK {
				if c.served {
					c.failed++
				}
				continue
			}
			c.served = true
			counts[call.By]++
		case <-timeout:
			t.Fatalf("after 30s, the Node client is still not %s: counts %v, last call %+v; stderr:\n%s", what, counts, last, c.stderr)
		}
	}
	return counts
}

// missing reads calls until n in a row went elsewhere than addr, and
// returns when addr got its last call (the zero time if none).
func (c *nodeClient) missing(t *testing.T, addr string, n int) time.Time {
	t.Helper()
	var last time.Time
	miss := 0
	c.until(t, fmt.Sprintf("making %d calls in a row not to %s", n, addr), func(m map[string]int) bool {
		if m[addr] > 0 {
			last, miss = time.Now(), 0
		} else if len(m) > 0 {
			miss++
		}
		clear(m)
		return miss >= n
	})
	return last
}

// A Node.js client (@grpc/grpc-js + @grpc/grpc-js-xds, no Muster code)
// calling xds:///greeter follows a register, a drain and a deregister, with
// no failed call once it has been served, and the control plane records no
// NACK from it.
func TestNodeClient(t *testing.T) {
	requireNodeClient(t)
	e := newEnv(t, xds.WithServices("greeter"))
	a, b, c := startGreeter(t), startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	nc := startNodeClient(t, e.addr, "node-client")
	nc.until(t, "calling a and b", hasAll(a.Addr, b.Addr))

	e.register(t, "greeter", "c", c.Addr, "", 0, false)
	got := nc.until(t, "calling c after its registration", hasAll(c.Addr))
	t.Logf("c registered: %v", got)

	drainedAt := time.Now()
	e.register(t, "greeter", "b", b.Addr, "", 0, true)
	last := nc.missing(t, b.Addr, 100)
	if d := last.Sub(drainedAt); d > 2*time.Second {
		t.Errorf("drained b got calls for %v after the drain, want < 2s", d)
	}
	got = nc.until(t, "making 200 calls", total(200))
	if got[b.Addr] != 0 || got[a.Addr] == 0 || got[c.Addr] == 0 {
		t.Fatalf("after draining b: %v, want a and c only", got)
	}
	if last.IsZero() {
		t.Logf("b drained: no call after the drain; then %v", got)
	} else {
		t.Logf("b drained: its last call %v after the drain; then %v", last.Sub(drainedAt), got)
	}

	e.deregister(t, "greeter", "a")
	nc.missing(t, a.Addr, 100)
	got = nc.until(t, "making 200 calls", total(200))
	if got[c.Addr] != 200 {
		t.Fatalf("after deregistering a: %v, want c only", got)
	}
	if nc.failed != 0 {
		t.Errorf("%d calls of the Node client failed after its first success", nc.failed)
	}
	st := e.cp.Stats()
	if st.NACKs != 0 {
		t.Errorf("the control plane recorded %d NACKs (see the log)", st.NACKs)
	}
	if st.ACKs == 0 {
		t.Errorf("no ACK from the Node client: %+v", st)
	}
}

func total(n int) func(map[string]int) bool {
	return func(m map[string]int) bool {
		s := 0
		for _, v := range m {
			s += v
		}
		return s >= n
	}
}

// lockedBuffer is an io.Writer safe for concurrent use, for a child's
// stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

var _ io.Writer = (*lockedBuffer)(nil)

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) WriteString(s string) {
	_, _ = l.Write([]byte(s))
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The Node client, which has no muster_p2c, takes the round-robin fallback
// of a MusterP2C cluster: it accepts the cluster (no NACK) and calls every
// instance.
func TestNodeClientMusterPolicy(t *testing.T) {
	requireNodeClient(t)
	e := newEnv(t, xds.WithServices("greeter"), xds.WithPolicy(xds.MusterP2C))
	a, b := startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	nc := startNodeClient(t, e.addr, "node-client")
	nc.until(t, "calling a and b", hasAll(a.Addr, b.Addr))
	got := nc.until(t, "making 100 calls", total(100))
	if got[a.Addr] < 40 || got[b.Addr] < 40 {
		t.Errorf("100 calls: %v, want about 50 each (round robin)", got)
	}
	if st := e.cp.Stats(); st.NACKs != 0 || st.ACKs == 0 {
		t.Errorf("the Node client sent %d NACKs and %d ACKs; want no NACK", st.NACKs, st.ACKs)
	}
}
