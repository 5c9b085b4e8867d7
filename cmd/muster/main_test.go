package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/syncbuf"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func TestMain(m *testing.M) {
	if os.Getenv(asCommandEnv) == "1" { // a child process a test started as the command
		main()
	}
	// Registry changes show up in watch within a second instead of six.
	watchProgressInterval = 200 * time.Millisecond
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// waitTimeout bounds every wait in these tests.
const waitTimeout = 20 * time.Second

// syncBuffer is a buffer safe for concurrent use.
type syncBuffer = syncbuf.Buffer

// testServer is a runServe running in the test process.
type testServer struct {
	opts     serveOptions
	endpoint string
	stderr   *syncBuffer
	cancel   context.CancelFunc
	done     chan error // receives runServe's result
	stopped  bool
}

// freeLoopbackURLs returns n http URLs on distinct loopback ports that were
// free a moment ago, below the kernel's range of ephemeral ports where it
// can read it: the ports of outgoing connections (the attack tests open
// thousands) then never take one before the process that is handed it
// listens there.
func freeLoopbackURLs(t *testing.T, n int) []string {
	t.Helper()
	var urls []string
	for range n {
		ln := reservePort(t)
		defer ln.Close()
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls
}

// reservePort listens on a free loopback port, below the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range) when that leaves room, else
// on one the kernel chooses.
func reservePort(t *testing.T) net.Listener {
	t.Helper()
	const lowest = 10000
	var low int
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			low, _ = strconv.Atoi(f[0])
		}
	}
	for range 100 {
		if low <= lowest+1000 {
			break
		}
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(lowest+rand.IntN(low-lowest))); err == nil {
			return ln
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("reserve a port: %v", err)
	}
	return ln
}

// startServe runs serve on dir with free loopback ports and waits until it
// is ready. The server is stopped at the end of the test.
func startServe(t *testing.T, dir string) *testServer {
	t.Helper()
	for attempt := 1; ; attempt++ {
		urls := freeLoopbackURLs(t, 2)
		s, err := tryServe(t, serveOptions{dataDir: dir, clientURL: urls[0], peerURL: urls[1], name: "test"})
		if err == nil {
			return s
		}
		// Someone else may have taken a port between the check and the
		// start.
		if !errors.Is(err, embedetcd.ErrAddrInUse) || attempt == 3 {
			t.Fatalf("serve did not start: %v", err)
		}
	}
}

// restartServe runs serve again with the options of s, which must be
// stopped.
func restartServe(t *testing.T, s *testServer) *testServer {
	t.Helper()
	s2, err := tryServe(t, s.opts)
	if err != nil {
		t.Fatalf("serve did not restart: %v", err)
	}
	return s2
}

func tryServe(t *testing.T, o serveOptions) (*testServer, error) {
	t.Helper()
	o.xdsSelfCheck = o.xdsAddr != "" // as withSelfCheck does for a command line
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{opts: o, stderr: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		s.done <- runServe(ctx, o, s.stderr, func(ep string) { ready <- ep })
	}()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case s.endpoint = <-ready:
		t.Cleanup(func() {
			s.stop(t)
			checkSelfCheck(t, []string{"serve", "--xds-listen", o.xdsAddr}, s.stderr.String())
		})
		return s, nil
	case err := <-s.done:
		cancel()
		if err == nil {
			err = errors.New("runServe returned nil before it was ready")
		}
		return nil, err
	case <-timer.C:
		cancel()
		t.Fatalf("serve not ready within %v; stderr:\n%s", waitTimeout, s.stderr)
		return nil, nil
	}
}

// stop cancels the server's context and checks that runServe returns nil
// in time. Later calls do nothing.
func (s *testServer) stop(t *testing.T) {
	t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	s.cancel()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("runServe after cancel = %v, want nil; stderr:\n%s", err, s.stderr)
		}
	case <-timer.C:
		t.Fatalf("runServe did not return within %v of its context ending", waitTimeout)
	}
}

// newClient returns an etcd client of endpoint, closed at the end of the
// test.
func newClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(etcd.ClientConfig(endpoint))
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// newRegistrar returns a Registrar on endpoint, closed at the end of the
// test.
func newRegistrar(t *testing.T, endpoint string) *etcd.Registrar {
	t.Helper()
	cli := newClient(t, endpoint)
	r, err := etcd.NewRegistrar(cli, etcd.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("NewRegistrar: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func register(t *testing.T, r registry.Registrar, in registry.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.Register(ctx, in); err != nil {
		t.Fatalf("Register %s/%s: %v", in.Name, in.ID, err)
	}
}

func deregister(t *testing.T, r registry.Registrar, in registry.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.Deregister(ctx, in.Name, in.Normalize().ID); err != nil {
		t.Fatalf("Deregister %s/%s: %v", in.Name, in.ID, err)
	}
}

// putRaw writes a value under key without a lease, as a broken or foreign
// writer would.
func putRaw(t *testing.T, cli *clientv3.Client, key, val string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := cli.Put(ctx, key, val); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// result is what one in-process run of the muster command produced.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// run runs the muster command line args in-process and waits for it.
func run(args ...string) result {
	var stdout, stderr syncBuffer
	start := time.Now()
	code := execute(context.Background(), args, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
}

// runOK runs args and fails the test unless the command succeeds.
func runOK(t *testing.T, args ...string) result {
	t.Helper()
	r := run(args...)
	if r.code != 0 {
		t.Fatalf("muster %s: exit code %d, want 0\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// background is a muster command running in-process, with its stdout read
// line by line.
type background struct {
	lines  chan string
	stderr *syncBuffer
	cancel context.CancelFunc
	code   chan int
	seen   []string
}

// start runs args in the background until stopped; its lines are those
// of stdout.
func start(t *testing.T, args ...string) *background {
	t.Helper()
	return startReading(t, false, args...)
}

// startReading runs args in the background until stopped; its lines are
// those of stderr if stderr is true (stdout is then discarded), else of
// stdout.
func startReading(t *testing.T, stderr bool, args ...string) *background {
	t.Helper()
	args = withSelfCheck(args)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	b := &background{
		lines:  make(chan string, 1000),
		stderr: &syncBuffer{},
		cancel: cancel,
		code:   make(chan int, 1),
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
		close(b.lines)
	}()
	go func() {
		var code int
		if stderr {
			code = execute(ctx, args, io.Discard, io.MultiWriter(pw, b.stderr))
		} else {
			code = execute(ctx, args, pw, b.stderr)
		}
		pw.Close()
		b.code <- code
	}()
	t.Cleanup(func() {
		b.stop(t)
		checkSelfCheck(t, args, b.stderr.String())
	})
	return b
}

// selfCheckBreach is what the xDS control plane logs for a published
// resource that breaks an xDS client's precondition (xds.WithSelfCheck).
const selfCheckBreach = "breaks a precondition of xDS clients"

// checkSelfCheck fails t when the control plane of args (if it ran one
// and served) published a resource breaking an xDS client's precondition,
// or served without its self-check.
func checkSelfCheck(t *testing.T, args []string, stderr string) {
	t.Helper()
	if strings.Contains(stderr, selfCheckBreach) {
		t.Errorf("muster %v published a resource breaking an xDS client's precondition; stderr:\n%s", args, stderr)
	}
	if strings.Contains(stderr, "serving ADS") && !strings.Contains(stderr, "self_check=true") && !strings.Contains(stderr, `"self_check":true`) {
		t.Errorf("muster %v served ADS without its self-check; stderr:\n%s", args, stderr)
	}
}

// withSelfCheck returns args with the xDS self-check turned on when they
// run a control plane (muster xds, serve --xds-listen), so that every
// resource the tests make the command publish is checked.
func withSelfCheck(args []string) []string {
	switch {
	case len(args) > 0 && args[0] == "xds":
		return append(slices.Clip(args), "--self-check")
	case len(args) > 0 && args[0] == "serve" && slices.Contains(args, "--xds-listen"):
		return append(slices.Clip(args), "--xds-self-check")
	}
	return args
}

// next returns the next line of output, failing the test if none comes
// within waitTimeout.
func (b *background) next(t *testing.T, what string) string {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	return b.nextBefore(t, what, timer.C)
}

// nextBefore returns the next line of output, failing the test if timeout
// (waitTimeout's timer) fires first.
func (b *background) nextBefore(t *testing.T, what string, timeout <-chan time.Time) string {
	t.Helper()
	select {
	case line, ok := <-b.lines:
		if !ok {
			t.Fatalf("output ended while waiting for %s; lines so far:\n%s\nstderr:\n%s",
				what, strings.Join(b.seen, "\n"), b.stderr)
		}
		b.seen = append(b.seen, line)
		return line
	case <-timeout:
		t.Fatalf("still waiting for %s after %v; lines so far:\n%s\nstderr:\n%s",
			what, waitTimeout, strings.Join(b.seen, "\n"), b.stderr)
		return ""
	}
}

// expect checks that the next line matches the regular expression re,
// anchored at both ends, and returns it.
func (b *background) expect(t *testing.T, re string) string {
	t.Helper()
	line := b.next(t, fmt.Sprintf("a line matching %q", re))
	if !regexp.MustCompile("^(?:" + re + ")$").MatchString(line) {
		t.Fatalf("got line %q, want one matching %q; lines so far:\n%s\nstderr:\n%s",
			line, re, strings.Join(b.seen, "\n"), b.stderr)
	}
	return line
}

// watchTime matches the time that starts each line of watch's table.
const watchTime = `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z `

// expectWatch is expect for a line of watch's table: re after the time.
func (b *background) expectWatch(t *testing.T, re string) string {
	t.Helper()
	return b.expect(t, watchTime+"(?:"+re+")")
}

// stop cancels the command and returns its exit code; the lines not read
// yet are added to seen. Later calls return -1 without waiting.
func (b *background) stop(t *testing.T) int {
	t.Helper()
	if b.cancel == nil {
		return -1
	}
	b.cancel()
	b.cancel = nil
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case code := <-b.code:
		for line := range b.lines {
			b.seen = append(b.seen, line)
		}
		return code
	case <-timer.C:
		t.Fatalf("command did not return within %v of its context ending", waitTimeout)
		return -1
	}
}
