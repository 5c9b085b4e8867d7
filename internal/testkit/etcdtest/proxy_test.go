package etcdtest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// echoServer echoes every connection and counts the bytes it received.
type echoServer struct {
	ln       net.Listener
	received atomic.Int64
	wg       sync.WaitGroup
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	var mu sync.Mutex
	var conns []net.Conn
	e.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			e.wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					e.received.Add(int64(n))
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func startTestProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p, err := newProxy("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

func dialProxy(t *testing.T, p *proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Bytes written during a stall reach nobody, and all of them arrive, in
// order, after heal, on the same connection.
func TestProxyStallLosesNothing(t *testing.T) {
	e := startEcho(t)
	p := startTestProxy(t, e.ln.Addr().String())
	c := dialProxy(t, p)
	// The connection is established end to end before the stall.
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}

	p.stall()
	// More than the proxy's queue, so that TCP flow control holds some.
	data := make([]byte, 4<<20)
	_, _ = rand.Read(data)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		wrote <- err
	}()
	time.Sleep(300 * time.Millisecond) // the stall's length is the experiment
	if got := e.received.Load(); got != 1 {
		t.Fatalf("the target received %d bytes during the stall, want only the 1 before it", got-1)
	}
	late := dialProxy(t, p) // accepted, but nothing flows
	if _, err := late.Write([]byte("y")); err != nil {
		t.Fatalf("write on a connection accepted during the stall: %v", err)
	}

	p.heal()
	got := make([]byte, len(data))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read the echo after heal: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("the echo after heal differs from what was written during the stall")
	}
	if err := <-wrote; err != nil {
		t.Fatalf("write during the stall: %v", err)
	}
	_ = late.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(late, make([]byte, 1)); err != nil {
		t.Fatalf("connection accepted during the stall, after heal: %v", err)
	}
	if n := p.accepted.Load(); n != 2 {
		t.Fatalf("proxy accepted %d connections, want 2", n)
	}
}

// Reset ends open connections with an RST at once and resets new ones
// until heal.
func TestProxyReset(t *testing.T) {
	e := startEcho(t)
	p := startTestProxy(t, e.ln.Addr().String())
	c := dialProxy(t, p)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}

	p.resetAll()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read on an open connection after reset: %v, want ECONNRESET", err)
	}
	// The RST of a new connection may reach the dialer before connect
	// returns (then the dial fails) or after (then the first read does).
	if n, err := net.DialTimeout("tcp", p.ln.Addr().String(), 2*time.Second); err == nil {
		_ = n.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := n.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read on a new connection during reset: %v, want ECONNRESET", err)
		}
		_ = n.Close()
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dial during reset: %v, want ECONNRESET at dial or first read", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("resets took %v, want them at once", took)
	}

	p.heal()
	h := dialProxy(t, p)
	if _, err := h.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	_ = h.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(h, make([]byte, 1)); err != nil {
		t.Fatalf("echo after heal: %v", err)
	}
}

// Delay adds d to each direction, keeps the order, and heal ends it for
// chunks already held.
func TestProxyDelay(t *testing.T) {
	const d = 100 * time.Millisecond
	e := startEcho(t)
	p := startTestProxy(t, e.ln.Addr().String())
	c := dialProxy(t, p)
	p.delayBy(d)
	start := time.Now()
	for i := range 5 { // pipelined: five chunks in flight take one round trip
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 5)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if !bytes.Equal(got, []byte{0, 1, 2, 3, 4}) {
		t.Fatalf("echo %v, want 0..4 in order", got)
	}
	if took < 2*d {
		t.Fatalf("round trip with delay %v took %v, want at least %v", d, took, 2*d)
	}

	p.delayBy(time.Hour)
	if _, err := c.Write([]byte{9}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the proxy read and hold it
	start = time.Now()
	p.heal()
	if _, err := io.ReadFull(c, got[:1]); err != nil || got[0] != 9 {
		t.Fatalf("held chunk after heal: %v %v", got[0], err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("held chunk arrived %v after heal, want at once", took)
	}
}
