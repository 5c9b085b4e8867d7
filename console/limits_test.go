package console_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
)

// A service page's stream is opened only for a service the registry lists:
// 2,000 requests for made-up names get 404 and open no etcd watch (without
// the check each opened one, 4,002 watchers in a review's run).
func TestStreamsOfMadeUpServicesOpenNoWatch(t *testing.T) {
	f := newFixture(t)
	f.register(registry.Instance{Name: "payments", ID: "p-1", Addr: "10.0.0.1:9000"})
	before := etcdtest.WatcherCount(t)
	var wg sync.WaitGroup
	codes := make(chan int, 2000)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 2000; i += 8 {
				resp, err := http.Get(fmt.Sprintf("%sapi/service/events?name=made-up-%d", f.url, i))
				if err != nil {
					codes <- 0
					continue
				}
				_ = resp.Body.Close()
				codes <- resp.StatusCode
			}
		}()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusNotFound {
			t.Fatalf("a stream of a made-up service: status %d, want 404", c)
		}
	}
	// The registrar's watch of its own keys may open meanwhile: allow a
	// few, not one per request.
	if after := etcdtest.WatcherCount(t); after > before+4 {
		t.Errorf("etcd watchers %v before, %v after 2,000 made-up names; want none opened for them", before, after)
	}
	// A listed service's page is served as before.
	if ev := firstEvent(t, f.url+"api/service/events?name=payments", ""); ev.Name != "state" {
		t.Errorf("payments' first event %q, want state", ev.Name)
	}
}

// One client address opens at most 32 event streams at once; the 33rd is
// refused with 429 and says why, and a stream ending gives its place back.
func TestEventStreamsPerClientBounded(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open []*http.Response
	for range 32 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"api/services/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %v %v", len(open)+1, resp.Status, err)
		}
		open = append(open, resp)
	}
	resp, err := http.Get(f.url + "api/services/events")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a 33rd stream: %s, want 429 with Retry-After", resp.Status)
	}
	_ = open[0].Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(f.url + "api/services/events")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream after one ended: still %v %v after 5 s", resp.Status, err)
		}
		time.Sleep(20 * time.Millisecond) // bounded poll: the server notices the closed stream on its next write or read
	}
	for _, r := range open[1:] {
		_ = r.Body.Close()
	}
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip, a client of its own to the console.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxConnsPerHost: 0, DisableKeepAlives: true}}
}

// openStream opens an event stream of url from c and returns it once its
// first event arrived, or its refusal's status.
func openStream(ctx context.Context, c *http.Client, url string) (*http.Response, int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, resp.StatusCode, nil
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, ":") { // the stream's first field (retry:, id:, event:)
		_ = resp.Body.Close()
		return nil, resp.StatusCode, fmt.Errorf("first line %q: %v", line, err)
	}
	return resp, resp.StatusCode, nil
}

// 16 client addresses opening every event stream they may (32 each: what
// one address may hold) fill no more than the console's shares: the last
// 64 of its 512 places are kept for clients that hold none, so a new
// client's services page and another's service page get their streams,
// while the whole process's goroutines and file descriptors stay within
// what the streams held account for. Without the reserve the 16 take all
// 512 places and both pages get 429.
func TestEventStreamsLeaveRoomForNewClients(t *testing.T) {
	f := newFixture(t)
	f.register(registry.Instance{Name: "payments", ID: "p-1", Addr: "10.0.0.1:9000"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	held := 0
	var open []*http.Response
	defer func() {
		for _, r := range open {
			_ = r.Body.Close()
		}
	}()
	for a := range 16 {
		c := clientFrom(fmt.Sprintf("127.0.1.%d", a+1))
		for range 32 {
			resp, code, err := openStream(ctx, c, f.url+"api/services/events")
			if err != nil {
				t.Fatal(err)
			}
			if code == http.StatusOK {
				open = append(open, resp)
				held++
			} else if code != http.StatusTooManyRequests {
				t.Fatalf("client %d: status %d, want 200 or 429", a+1, code)
			}
		}
	}
	if held > 512-64+2 {
		t.Errorf("16 clients hold %d streams, want at most %d (their shares up to the reserve, then one each for the two that held none)", held, 512-64+2)
	}
	for _, page := range []struct{ ip, path string }{
		{"127.0.2.1", "api/services/events"},
		{"127.0.2.2", "api/service/events?name=payments"},
	} {
		resp, code, err := openStream(ctx, clientFrom(page.ip), f.url+page.path)
		if err != nil || code != http.StatusOK {
			t.Errorf("a new client's %s while 16 clients hold %d streams: status %d, %v; want its stream", page.path, held, code, err)
			continue
		}
		open = append(open, resp)
	}
	// Each stream holds, in this one process, the client's and the
	// server's connection (2 descriptors) and a few goroutines (the
	// client's transport and the server's handler): 8 per stream is a
	// generous bound, not a measurement.
	streams := len(open)
	if g := runtime.NumGoroutine() - goroutines; g > 8*streams+64 {
		t.Errorf("%d goroutines more for %d streams, want at most %d", g, streams, 8*streams+64)
	}
	if n := openFDs(t) - fds; n > 2*streams+64 {
		t.Errorf("%d file descriptors more for %d streams, want at most %d", n, streams, 2*streams+64)
	}
	t.Logf("16 clients hold %d streams; %d goroutines and %d descriptors more for %d streams in all",
		held, runtime.NumGoroutine()-goroutines, openFDs(t)-fds, streams)
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// A signed-in operator's pages keep their streams when anonymous clients
// hold every place: 78 addresses (14 filling their shares, 64 taking the
// reserve) hold all 512, a new anonymous client gets 429, and an admin
// signed in from another address gets its service page's stream from the
// signed-in sessions' places. Without those places the admin gets 429 too.
func TestEventStreamsKeepRoomForSignedInSessions(t *testing.T) {
	f := newFixture(t, console.WithAdminUsers(htpasswd(t, "alice", "correct horse")))
	f.register(registry.Instance{Name: "payments", ID: "p-1", Addr: "10.0.0.1:9000"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open []*http.Response
	defer func() {
		for _, r := range open {
			_ = r.Body.Close()
		}
	}()
	take := func(ip string, n int) {
		c := clientFrom(ip)
		for range n {
			resp, code, err := openStream(ctx, c, f.url+"api/services/events")
			if err != nil || code != http.StatusOK {
				t.Fatalf("client %s: status %d, %v; want its stream", ip, code, err)
			}
			open = append(open, resp)
		}
	}
	for a := range 14 {
		take(fmt.Sprintf("127.0.1.%d", a+1), 32)
	}
	for a := range 64 {
		take(fmt.Sprintf("127.0.3.%d", a+1), 1)
	}
	if _, code, err := openStream(ctx, clientFrom("127.0.2.1"), f.url+"api/services/events"); err != nil || code != http.StatusTooManyRequests {
		t.Fatalf("an anonymous client while %d streams are held: status %d, %v; want 429", len(open), code, err)
	}
	admin := newClient(t, f.url)
	jar := admin.http.Jar
	admin.http = clientFrom("127.0.2.2")
	admin.http.Jar = jar
	admin.loginAs("alice", "correct horse")
	resp, code, err := openStream(ctx, admin.http, f.url+"api/service/events?name=payments")
	if err != nil || code != http.StatusOK {
		t.Fatalf("a signed-in admin's service page while %d streams are held: status %d, %v; want its stream", len(open), code, err)
	}
	open = append(open, resp)
}
