package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/browsertest"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/proctest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
)

// asCommandEnv set to 1 makes the test binary run as the muster command
// (TestMain), so that a test can run it as a child process and measure
// the whole process.
const asCommandEnv = "MUSTER_TEST_AS_COMMAND"

// childFiles is the file-descriptor limit of the serve processes these
// tests attack: each listener may then hold 512 connections (a quarter),
// and the process keeps 1,024 for itself and its etcd.
const childFiles = 2048

// child is muster serve running as a child process, with its file limit
// at childFiles.
type child struct {
	cmd      *exec.Cmd
	endpoint string // etcd's client URL
	http     string // --metrics-listen
	xds      string // --xds-listen
	stderr   *syncBuffer
	exited   chan struct{}
}

// startChild runs muster serve with extra flags as a child process,
// waits until it is ready and stops it (SIGTERM) at the end of the test.
// Its ports were free a moment before it starts: when another process
// took one meanwhile (an outgoing connection's port), it starts again on
// others.
func startChild(t *testing.T, extra ...string) *child {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c, err := tryChild(t, extra)
		if err == nil {
			return c
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; again on other ports", attempt, err)
	}
}

// tryChild is one attempt of startChild.
func tryChild(t *testing.T, extra []string) (*child, error) {
	t.Helper()
	urls := freeLoopbackURLs(t, 4)
	c := &child{endpoint: urls[0], http: strings.TrimPrefix(urls[2], "http://"), xds: strings.TrimPrefix(urls[3], "http://"),
		stderr: &syncBuffer{}, exited: make(chan struct{})}
	args := append([]string{"--nofile=" + strconv.Itoa(childFiles), "--", os.Args[0], "serve",
		"--data-dir", t.TempDir(), "--listen-client-url", urls[0], "--listen-peer-url", urls[1],
		"--metrics-listen", c.http, "--xds-listen", c.xds}, extra...)
	c.cmd = exec.Command("prlimit", args...)
	c.cmd.Env = append(os.Environ(), asCommandEnv+"=1")
	c.cmd.SysProcAttr = proctest.SysProcAttr()
	pipe, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start muster serve under prlimit: %v", err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			fmt.Fprintln(c.stderr, sc.Text())
			if strings.Contains(sc.Text(), "ready, clients use --endpoints") {
				close(ready)
			}
		}
		_ = c.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(waitTimeout):
			_ = c.cmd.Process.Kill()
			<-c.exited
			t.Errorf("muster serve did not stop within %v of SIGTERM", waitTimeout)
		}
	})
	select {
	case <-ready:
	case <-c.exited:
		return nil, fmt.Errorf("muster serve exited before it was ready:\n%s", c.stderr)
	case <-time.After(waitTimeout):
		t.Fatalf("muster serve not ready within %v:\n%s", waitTimeout, c.stderr)
	}
	return c, nil
}

// pid is the serve process's (prlimit execs it).
func (c *child) pid() int { return c.cmd.Process.Pid }

// alive fails t if the process has exited.
func (c *child) alive(t *testing.T) {
	t.Helper()
	select {
	case <-c.exited:
		t.Fatalf("muster serve exited:\n%s", c.stderr)
	default:
	}
}

// files returns how many file descriptors the process holds.
func (c *child) files(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", c.pid()))
	if err != nil {
		t.Fatalf("read the process's descriptors: %v", err)
	}
	return len(fds)
}

// usage returns the process's resident memory and, from its /metrics,
// its goroutines and heap in use.
func (c *child) usage(t *testing.T) (rssMB float64, goroutines int, heapMB float64) {
	t.Helper()
	rssMB = c.rss(t)
	body := c.get(t, "/metrics")
	if m := regexp.MustCompile(`(?m)^go_goroutines (\d+)`).FindStringSubmatch(body); m != nil {
		goroutines, _ = strconv.Atoi(m[1])
	}
	if m := regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes (\S+)`).FindStringSubmatch(body); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		heapMB = v / (1 << 20)
	}
	return rssMB, goroutines, heapMB
}

// rss returns the process's resident memory in MB.
func (c *child) rss(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.pid()))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in the process's status")
	}
	kb, _ := strconv.Atoi(string(m[1]))
	return float64(kb) / 1024
}

// get fetches path from the HTTP listener as a legitimate client (from
// 127.0.0.1, on a connection of its own) and returns the body; it fails t
// unless the answer is 200.
func (c *child) get(t *testing.T, path string) string {
	t.Helper()
	body, err := c.tryGet(path)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func (c *child) tryGet(path string) (string, error) {
	return c.tryGetFrom(netip.MustParseAddr("127.0.0.1"), path)
}

// tryGetFrom is tryGet from the loopback address src.
func (c *child) tryGetFrom(src netip.Addr, path string) (string, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dialFrom(ctx, src, addr) }}}
	resp, err := hc.Get("http://" + c.http + path)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(b), err
}

// loopbacks returns n loopback addresses from 127.base.0.1 on (Linux
// routes all of 127.0.0.0/8 to the loopback interface).
func loopbacks(base byte, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{127, base, byte(i / 250), byte(i%250 + 1)})
	}
	return out
}

// dialFrom connects to addr from the loopback address src.
func dialFrom(ctx context.Context, src netip.Addr, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

// holdHTTP opens perSource connections to addr from each of srcs, 64 at a
// time, each sending GET /healthz and waiting for its answer on a
// kept-alive connection; it keeps the answered ones open (closed at the
// end of the test) and returns them.
func holdHTTP(t *testing.T, addr string, srcs []netip.Addr, perSource int) []net.Conn {
	t.Helper()
	jobs := make(chan netip.Addr)
	var (
		mu   sync.Mutex
		held []net.Conn
		wg   sync.WaitGroup
	)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for src := range jobs {
				c, err := dialFrom(context.Background(), src, addr)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
				var resp *http.Response
				if err == nil {
					resp, err = http.ReadResponse(bufio.NewReader(c), nil)
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					_ = c.Close()
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = c.SetDeadline(time.Time{})
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		}()
	}
	for range perSource {
		for _, src := range srcs {
			jobs <- src
		}
	}
	close(jobs)
	wg.Wait()
	t.Cleanup(func() { closeAll(held) })
	return held
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

// The HTTP listener of muster serve (console, /metrics, /healthz,
// /prometheus/sd) admits connections through its shares: 20,000
// kept-alive connections, from two addresses and then from 500, leave the
// process within its file budget, its etcd serving (muster ls answers),
// and a legitimate client from another address served every time (the
// console's page in Chromium among them).
// Without the shares the two addresses hold every connection they open.
func TestServeSurvivesIdleHTTPConnections(t *testing.T) {
	c := startChild(t)
	register(t, newRegistrar(t, c.endpoint), registry.Instance{Name: "greeter", Addr: "127.0.0.1:9000"})
	filesBefore := c.files(t)
	rssBefore, goroutinesBefore, heapBefore := c.usage(t)

	// Two addresses, 10,000 connections each: each keeps its share (64).
	held := holdHTTP(t, c.http, loopbacks(2, 2), 10000)
	if len(held) > 2*64 {
		t.Errorf("two addresses hold %d connections, want at most 2 × 64", len(held))
	}
	for i := range 10 {
		if _, err := c.tryGet("/healthz"); err != nil {
			t.Errorf("legitimate request %d of 10 while two addresses hold their shares: %v", i+1, err)
		}
	}
	if _, err := c.tryGet(consolePath); err != nil {
		t.Errorf("the console page while two addresses hold their shares: %v", err)
	}
	files := c.files(t)
	rss, goroutines, heap := c.usage(t)
	t.Logf("two addresses, 20,000 connections: %d held; files %d → %d, goroutines %d → %d, heap %.1f → %.1f MB, RSS %.1f → %.1f MB",
		len(held), filesBefore, files, goroutinesBefore, goroutines, heapBefore, heap, rssBefore, rss)
	if files > filesBefore+2*64+16 {
		t.Errorf("files %d → %d with %d connections held", filesBefore, files, len(held))
	}
	b := browsertest.Start(t)
	b.Do(waitTimeout, "the console's service page, in Chromium, lists the instance while two addresses hold their shares",
		chromedp.Navigate("http://"+c.http+consolePath+"?name=greeter"),
		browsertest.WaitJS(`document.querySelector('#instances tr[data-id="127.0.0.1:9000"]') !== null`))
	closeAll(held)

	// 500 addresses, 40 each: at most a quarter of the file limit. Then
	// one connection from each of 64 more takes what is left.
	held = holdHTTP(t, c.http, loopbacks(1, 500), 40)
	held = append(held, holdHTTP(t, c.http, loopbacks(3, 64), 1)...)
	c.alive(t)
	files = c.files(t)
	// The listener is full (564 addresses hold a place each, and
	// 127.0.0.1 the browser's connections): a newcomer is refused, and the
	// host's own client (127.0.0.1) takes a place beyond the bound.
	if _, err := c.tryGetFrom(netip.MustParseAddr("127.0.0.4"), "/livez"); err == nil {
		t.Errorf("a newcomer from 127.0.0.4 while 564 addresses fill the listener: answered, want refused")
	}
	if _, err := c.tryGet("/livez"); err != nil {
		t.Errorf("/livez from 127.0.0.1 while 564 addresses fill the listener: %v", err)
	}
	t.Logf("564 addresses, 20,064 connections: %d held; files %d, RSS %.1f MB", len(held), files, c.rss(t))
	if len(held) > childFiles/4 {
		t.Errorf("500 addresses hold %d connections, more than a quarter of the file limit (%d)", len(held), childFiles)
	}
	if files > childFiles/2 {
		t.Errorf("the process holds %d files of its %d while attacked: etcd's half is reached", files, childFiles)
	}
	if r := runOK(t, "ls", "--endpoints", c.endpoint); !strings.Contains(r.stdout, "greeter") {
		t.Errorf("muster ls while 500 addresses hold HTTP connections:\n%s", r.stdout)
	}
	closeAll(held)
	// Once they let go, a legitimate client is served again (the server
	// notices each closed connection as it reads).
	deadline := time.Now().Add(waitTimeout)
	for {
		_, err := c.tryGet("/healthz")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz %v after the attackers closed their connections: %v", waitTimeout, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a listener that gives no event
	}
	c.alive(t)
}

// ADS admits connections and streams through shares too: 1,100 silent
// connections from one address (each reopened when closed), and 16 silent streams on each of 20
// connections from another, leave a client from a third address served,
// over plaintext and with client certificates required; the silent
// streams end after 10 s. With client certificates required, the silent
// connections hold only their address's 8 places among the handshakes
// in progress. Without the shares the 1,100 connections take every place
// (the old cap was 1,024 for all clients). The legitimate client comes
// from 127.0.0.4, not 127.0.0.1: the host's own address has places beyond
// the bound.
func TestServeXDSSurvivesSilentClients(t *testing.T) {
	f := etcdtest.GenerateTLS(t)
	for _, tc := range []struct {
		name  string
		flags []string
		creds func() credentials.TransportCredentials
	}{
		{"plaintext", nil, insecure.NewCredentials},
		{"client certificates", []string{"--xds-cert", f.ServerCertFile, "--xds-key", f.ServerKeyFile, "--xds-cacert", f.CAFile},
			func() credentials.TransportCredentials { return credentials.NewTLS(f.ClientTLS()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startChild(t, tc.flags...)
			be := testbackend.Start(t)
			register(t, newRegistrar(t, c.endpoint), registry.Instance{Name: "greeter", Addr: be.Addr})
			if err := adsListener(c.xds, tc.creds(), "greeter"); err != nil {
				t.Fatalf("before the attack: %v", err)
			}
			filesBefore := c.files(t)

			// Each legitimate client is served within 8 s: before the
			// attackers' connections time out (10 s) and free places.
			third := grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				return dialFrom(ctx, netip.MustParseAddr("127.0.0.4"), a)
			})
			legitimate := func(during string) {
				for i := range 5 {
					if err := adsListenerWithin(c.xds, tc.creds(), "greeter", 8*time.Second, third); err != nil {
						t.Errorf("legitimate client %d of 5 %s: %v", i+1, during, err)
					}
				}
			}
			holdSilent(t, netip.MustParseAddr("127.0.0.2"), c.xds, 1100)
			files := c.files(t)
			legitimate("while one address holds 1,100 silent connections")
			streams := silentStreams(t, c.xds, tc.creds(), netip.MustParseAddr("127.0.0.3"), 20)
			legitimate("while another holds 320 silent streams")
			rss, goroutines, heap := c.usage(t)
			t.Logf("1,100 silent connections, 320 silent streams: files %d → %d, goroutines %d, heap %.1f MB, RSS %.1f MB",
				filesBefore, files, goroutines, heap, rss)
			share := 64 // connections
			if tc.flags != nil {
				share = 8 // handshakes in progress
			}
			if files > filesBefore+share+16 {
				t.Errorf("files %d → %d: one address holds more than its share (%d)", filesBefore, files, share)
			}
			// A silent stream ends 10 s after its start.
			if _, err := streams[0].Recv(); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no request within") {
				t.Errorf("a stream that never sent a request: %v, want it ended (DeadlineExceeded)", err)
			}
			c.alive(t)
		})
	}
}

// holdSilent keeps n connections from src to addr open until the end of
// the test, sending nothing: each one closed is opened again a second
// later. It returns once n connections have been opened.
func holdSilent(t *testing.T, src netip.Addr, addr string, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var opened, wg sync.WaitGroup
	opened.Add(n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for ctx.Err() == nil {
				conn, err := dialFrom(ctx, src, addr)
				if first {
					first = false
					opened.Done()
				}
				if err == nil {
					stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
					_, _ = io.Copy(io.Discard, conn) // until the server closes it
					stop()
					_ = conn.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	opened.Wait()
}

// silentStreams opens 16 ADS streams on each of n connections from src to
// addr, sending nothing on them.
func silentStreams(t *testing.T, addr string, creds credentials.TransportCredentials, src netip.Addr, n int) []discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the server ends them after 10 s
	t.Cleanup(cancel)
	var out []discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	for range n {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return dialFrom(ctx, src, a) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		client := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
		for range 16 {
			s, err := client.StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatalf("open a silent stream: %v", err)
			}
			out = append(out, s)
		}
	}
	return out
}

// Every command that opens a listener takes --client-ipv4-prefix, and
// refuses a prefix out of 8..32 before it starts anything.
func TestClientIPv4PrefixFlag(t *testing.T) {
	for _, args := range [][]string{
		{"serve"},
		{"xds"},
		{"console"},
		{"promsd"},
		{"register", "--name", "user", "--addr", "127.0.0.1:9000", "--check", "tcp://127.0.0.1:9000"},
	} {
		r := run(append(args, "--client-ipv4-prefix", "33")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--client-ipv4-prefix 33: want 8..32") {
			t.Errorf("muster %s --client-ipv4-prefix 33: exit %d, stderr %q; want a usage error naming the flag", args[0], r.code, r.stderr)
		}
	}
}
