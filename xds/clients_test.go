package xds_test

// The harness shared by the tests of xDS clients in other languages
// (node_test.go, python_test.go): a greeter backend that names itself in
// its replies, a client running as a child process that prints one JSON
// line per call, and the register/drain/deregister scenario they follow.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/greeterpb"
	"github.com/musterhq/muster/xds"
)

// greeterBackend is a real gRPC server of the demo Greeter service whose
// replies say which backend answered (served_by = its address), so that a
// client in another language can tell the backends apart.
type greeterBackend struct {
	greeterpb.UnimplementedGreeterServer
	Addr string

	fail  atomic.Bool  // every call fails with UNAVAILABLE
	delay atomic.Int64 // ns each call waits before it answers
}

func (g *greeterBackend) SayHello(ctx context.Context, req *greeterpb.HelloRequest) (*greeterpb.HelloReply, error) {
	if d := time.Duration(g.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if g.fail.Load() {
		return nil, status.Error(codes.Unavailable, "greeter: failing on purpose")
	}
	return &greeterpb.HelloReply{Message: "hello " + req.GetName(), ServedBy: g.Addr}, nil
}

func startGreeter(t testing.TB) *greeterBackend {
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

// callEvery is the pause between two calls of the tests' clients.
const callEvery = 5 * time.Millisecond

// millis is d as a whole number of milliseconds, for a client's command
// line.
func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// clientCall is one line of a child client's output.
type clientCall struct {
	N     int     `json:"n"`
	Burst int     `json:"burst"` // the number of the burst it is of, 0 for none
	OK    bool    `json:"ok"`
	By    string  `json:"by"`
	Code  int     `json:"code"`
	Error string  `json:"error"`
	MS    float64 `json:"ms"` // its duration, measured by the client
}

// childClient is an xDS client in another language running as a child
// process.
type childClient struct {
	name    string // "the Node client", for messages
	calls   chan clientCall
	stderr  *lockedBuffer
	failed  int        // failed calls seen by until, after the first success
	failure clientCall // the last of them
	served  bool
	// command hands the client a line of its commands ("burst N GAP").
	command func(line string) error
	bursts  int // bursts asked for
}

// startChild runs cmd, a client calling in a loop and printing one JSON
// line per call, with the bootstrap boot in GRPC_XDS_BOOTSTRAP_CONFIG (and
// no GRPC_XDS_BOOTSTRAP). The client reads its commands as lines on its
// stdin, and must exit when its stdin closes: the test's cleanup closes
// it, reaps the process, and kills it (failing the test) if it has not
// exited 5 s later.
func startChild(t testing.TB, name string, cmd *exec.Cmd, boot string) *childClient {
	t.Helper()
	// No GRPC_XDS_BOOTSTRAP of the test's environment: it would win, and
	// the C-core (Python) reads even an empty one as a file name.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRPC_XDS_BOOTSTRAP=") && !strings.HasPrefix(kv, "GRPC_XDS_BOOTSTRAP_CONFIG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GRPC_XDS_BOOTSTRAP_CONFIG="+boot)
	stdin, err := cmd.StdinPipe() // the client exits when it closes
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &childClient{name: name, calls: make(chan clientCall, 1024), stderr: &lockedBuffer{},
		command: func(line string) error { _, err := io.WriteString(stdin, line+"\n"); return err }}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(c.calls)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var call clientCall
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
			t.Errorf("%s did not exit within 5s of its stdin closing; killed", name)
		}
	})
	return c
}

// until reads the client's calls until cond holds on the per-backend
// counts of successful calls, failing after 30 s. Failed calls after the
// first success are counted in c.failed.
func (c *childClient) until(t *testing.T, what string, cond func(map[string]int) bool) map[string]int {
	t.Helper()
	counts := map[string]int{}
	timeout := time.After(30 * time.Second)
	var last clientCall
	for !cond(counts) {
		select {
		case call, ok := <-c.calls:
			if !ok {
				t.Fatalf("%s exited before %s; stderr:\n%s", c.name, what, c.stderr)
			}
			last = call
			if !call.OK {
				if c.served {
					c.failed++
					c.failure = call
				}
				continue
			}
			c.served = true
			counts[call.By]++
		case <-timeout:
			t.Fatalf("after 30s, %s is still not %s: counts %v, last call %+v; stderr:\n%s", c.name, what, counts, last, c.stderr)
		}
	}
	return counts
}

// streak reads the client's calls until n in a row satisfy ok, and reports
// whether that happened within within.
func (c *childClient) streak(t *testing.T, n int, within time.Duration, ok func(clientCall) bool) bool {
	t.Helper()
	timeout := time.After(within)
	run := 0
	for run < n {
		select {
		case call, open := <-c.calls:
			if !open {
				t.Fatalf("%s exited; stderr:\n%s", c.name, c.stderr)
			}
			if ok(call) {
				run++
			} else {
				run = 0
			}
		case <-timeout:
			return false
		}
	}
	return true
}

// streakTimed is streak that also returns the longest call of the streak
// (ms) and the last call read.
func (c *childClient) streakTimed(t *testing.T, n int, within time.Duration, ok func(clientCall) bool) (bool, float64, clientCall) {
	t.Helper()
	var last clientCall
	slowest := 0.0
	passed := c.streak(t, n, within, func(call clientCall) bool {
		last = call
		if !ok(call) {
			slowest = 0
			return false
		}
		slowest = max(slowest, call.MS)
		return true
	})
	return passed, slowest, last
}

// during returns the calls the client makes over d.
func (c *childClient) during(t *testing.T, d time.Duration) []clientCall {
	t.Helper()
	var out []clientCall
	end := time.After(d)
	for {
		select {
		case call, open := <-c.calls:
			if !open {
				t.Fatalf("%s exited; stderr:\n%s", c.name, c.stderr)
			}
			out = append(out, call)
		case <-end:
			return out
		}
	}
}

// burst makes the client start n calls gap apart (0: at once) after its
// current call, and returns them (the calls of its loop read meanwhile are
// dropped), failing t after 30 s.
func (c *childClient) burst(t *testing.T, n int, gap time.Duration) []clientCall {
	t.Helper()
	c.bursts++
	if err := c.command(fmt.Sprintf("burst %d %d", n, gap.Milliseconds())); err != nil {
		t.Fatalf("ask %s for a burst: %v", c.name, err)
	}
	burst := c.bursts
	return c.collect(t, n, fmt.Sprintf("calls of burst %d", burst), func(call clientCall) bool { return call.Burst == burst })
}

// next returns the client's next n calls.
func (c *childClient) next(t *testing.T, n int) []clientCall {
	t.Helper()
	return c.collect(t, n, "calls", func(clientCall) bool { return true })
}

// collect returns the client's next n calls that keep takes (the others
// read meanwhile are dropped), failing t after 30 s naming what.
func (c *childClient) collect(t *testing.T, n int, what string, keep func(clientCall) bool) []clientCall {
	t.Helper()
	var out []clientCall
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case call, open := <-c.calls:
			if !open {
				t.Fatalf("%s exited; stderr:\n%s", c.name, c.stderr)
			}
			if keep(call) {
				out = append(out, call)
			}
		case <-timeout:
			t.Fatalf("after 30s %s has made %d of %d %s; stderr:\n%s", c.name, len(out), n, what, c.stderr)
		}
	}
	return out
}

// missing reads calls until n in a row went elsewhere than addr, and
// returns when addr got its last call (the zero time if none).
func (c *childClient) missing(t *testing.T, addr string, n int) time.Time {
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

// testClientFollows is the core of the tests of clients in other
// languages: a client started by start (with the control plane's address)
// and calling xds:///greeter follows a register, a drain
// and a deregister, with no failed call once it has been served, and the
// control plane records no NACK from it.
func testClientFollows(t *testing.T, start func(t *testing.T, addr string) *childClient) {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b, c := startGreeter(t), startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	cl := start(t, e.addr)
	cl.until(t, "calling a and b", hasAll(a.Addr, b.Addr))

	e.register(t, "greeter", "c", c.Addr, "", 0, false)
	got := cl.until(t, "calling c after its registration", hasAll(c.Addr))
	t.Logf("c registered: %v", got)

	drainedAt := time.Now()
	e.register(t, "greeter", "b", b.Addr, "", 0, true)
	last := cl.missing(t, b.Addr, 100)
	if d := last.Sub(drainedAt); d > 2*time.Second {
		t.Errorf("drained b got calls for %v after the drain, want < 2s", d)
	}
	got = cl.until(t, "making 200 calls", total(200))
	if got[b.Addr] != 0 || got[a.Addr] == 0 || got[c.Addr] == 0 {
		t.Fatalf("after draining b: %v, want a and c only", got)
	}
	if last.IsZero() {
		t.Logf("b drained: no call after the drain; then %v", got)
	} else {
		t.Logf("b drained: its last call %v after the drain; then %v", last.Sub(drainedAt), got)
	}

	e.deregister(t, "greeter", "a")
	cl.missing(t, a.Addr, 100)
	got = cl.until(t, "making 200 calls", total(200))
	if got[c.Addr] != 200 {
		t.Fatalf("after deregistering a: %v, want c only", got)
	}
	if cl.failed != 0 {
		t.Errorf("%d calls of %s failed after its first success", cl.failed, cl.name)
	}
	st := e.cp.Stats()
	if st.NACKs != 0 {
		t.Errorf("the control plane recorded %d NACKs (see the log)", st.NACKs)
	}
	if st.ACKs == 0 {
		t.Errorf("no ACK from %s: %+v", cl.name, st)
	}
}

// testClientFallback checks that a client started by start, which has no
// muster_p2c, takes the round-robin fallback of a MusterP2C cluster: it
// accepts the cluster (no NACK) and calls every instance.
func testClientFallback(t *testing.T, start func(t *testing.T, addr string) *childClient) {
	e := newEnv(t, xds.WithServices("greeter"), xds.WithLBPolicy(xds.MusterP2C))
	a, b := startGreeter(t), startGreeter(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	cl := start(t, e.addr)
	cl.until(t, "calling a and b", hasAll(a.Addr, b.Addr))
	got := cl.until(t, "making 100 calls", total(100))
	if got[a.Addr] < 40 || got[b.Addr] < 40 {
		t.Errorf("100 calls: %v, want about 50 each (round robin)", got)
	}
	if st := e.cp.Stats(); st.NACKs != 0 || st.ACKs == 0 {
		t.Errorf("%s sent %d NACKs and %d ACKs; want no NACK", cl.name, st.NACKs, st.ACKs)
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
