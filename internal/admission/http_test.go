package admission

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// An HTTP listener filled by clients from 127.0.0.2 on (a share each),
// refusing a newcomer, still answers a client at 127.0.0.1: the host's own
// health check or Prometheus. Without the Loopback places it is refused
// like the newcomer.
func TestHTTPLoopbackPlaces(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTP(lis, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), nil, 0)
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
	addr := lis.Addr().String()
	pool := srv.Listener.Pool()

	// Every place: shares from 127.0.1.x up to the places kept for
	// clients that hold none, then one from each of as many 127.0.2.x;
	// each connection kept alive after one answered request.
	var shares, ones []netip.Addr
	for i := range (pool.Max - pool.Reserve + pool.Share - 1) / pool.Share {
		shares = append(shares, netip.AddrFrom4([4]byte{127, 0, 1, byte(i + 2)}))
	}
	for i := range pool.Reserve {
		ones = append(ones, netip.AddrFrom4([4]byte{127, 0, 2, byte(i + 2)}))
	}
	held := holdConns(t, addr, shares, pool.Share)
	held = append(held, holdConns(t, addr, ones, 1)...)
	if len(held) != pool.Max || pool.Held() != pool.Max {
		t.Fatalf("%d connections held (the pool counts %d), want the bound %d", len(held), pool.Held(), pool.Max)
	}
	if err := get(addr, netip.MustParseAddr("127.0.0.200")); err == nil {
		t.Fatalf("a newcomer from 127.0.0.200 with every place taken: answered, want refused")
	}
	for i := range 5 {
		if err := get(addr, netip.MustParseAddr("127.0.0.1")); err != nil {
			t.Errorf("request %d of 5 from 127.0.0.1 with every place taken by others: %v", i+1, err)
		}
	}
	fds, _ := os.ReadDir("/proc/self/fd") // none where there is no /proc
	t.Logf("%d connections of %d addresses held (%d Loopback places); 127.0.0.1 answered 5 of 5; the test process (both ends): %d files, %d goroutines",
		len(held), len(shares)+len(ones), pool.Loopback, len(fds), runtime.NumGoroutine())
}

// dialFrom connects to addr from the loopback address src.
func dialFrom(ctx context.Context, src netip.Addr, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

// request sends GET / on c and reads the answer, within 5 s.
func request(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := fmt.Fprintf(c, "GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

// get sends one request from src to addr on a connection of its own.
func get(addr string, src netip.Addr) error {
	c, err := dialFrom(context.Background(), src, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return request(c)
}

// holdConns opens perSource connections to addr from each of srcs, each
// answered once and kept alive until the end of the test, and returns
// those answered.
func holdConns(t *testing.T, addr string, srcs []netip.Addr, perSource int) []net.Conn {
	t.Helper()
	var (
		mu   sync.Mutex
		held []net.Conn
		wg   sync.WaitGroup
	)
	for _, src := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perSource {
				c, err := dialFrom(context.Background(), src, addr)
				if err != nil {
					continue
				}
				if request(c) != nil {
					_ = c.Close()
					continue
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
	})
	return held
}
