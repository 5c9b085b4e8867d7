package zookeeper

import (
	"io"
	"net"
	"testing"
	"time"
)

func TestHandshakeEndsAfterConnectResponse(t *testing.T) {
	var h handshake
	resp := []byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 9}
	for i, b := range resp[:6] { // byte by byte: header split across reads
		h.read([]byte{b})
		if h.done() {
			t.Fatalf("done after %d bytes", i+1)
		}
	}
	h.read(resp[6:]) // the last byte of the response and the next frame
	if !h.done() {
		t.Fatalf("not done after the response")
	}
	if h.n != 7 {
		t.Fatalf("counted %d bytes, want 7 (not past the response)", h.n)
	}
}

func TestBoundDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	far, near := now.Add(time.Minute), now.Add(time.Second)
	if got := boundDeadline(far, now, 2*time.Second, false); !got.Equal(now.Add(2 * time.Second)) {
		t.Fatalf("far deadline during the handshake: %v", got)
	}
	if got := boundDeadline(time.Time{}, now, 2*time.Second, false); !got.Equal(now.Add(2 * time.Second)) {
		t.Fatalf("no deadline during the handshake: %v", got)
	}
	if got := boundDeadline(near, now, 2*time.Second, false); !got.Equal(near) {
		t.Fatalf("near deadline during the handshake: %v", got)
	}
	if got := boundDeadline(far, now, 2*time.Second, true); !got.Equal(far) {
		t.Fatalf("far deadline after the handshake: %v", got)
	}
}

// After the handshake, the receiving side reads nothing until the
// set-watches request is written (or gateWait passed).
func TestReadsWaitForSetWatches(t *testing.T) {
	for _, setWatches := range []bool{true, false} {
		client, server := net.Pipe()
		c := &handshakeConn{Conn: client, limit: time.Minute, gate: make(chan struct{})}
		go func() { _, _ = io.Copy(io.Discard, server) }()
		go func() {
			_, _ = server.Write([]byte{0, 0, 0, 1, 'x'}) // the connect response
			_, _ = server.Write([]byte{0, 0, 0, 1, 'y'}) // a response
		}()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		start := time.Now()
		go func() {
			_, _ = io.ReadFull(c, buf)
			got <- time.Now()
		}()
		select {
		case <-got:
			t.Fatalf("a read after the handshake returned before the set-watches request")
		case <-time.After(gateWait / 4):
		}
		if setWatches {
			req := []byte{0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, opSetWatches}
			if _, err := c.Write(req); err != nil {
				t.Fatal(err)
			}
		}
		at := <-got
		if !setWatches && at.Sub(start) < gateWait {
			t.Fatalf("without set-watches the read went on after %v, before %v", at.Sub(start), gateWait)
		}
		c.mu.Lock()
		timedOut := c.timedOut
		c.mu.Unlock()
		if timedOut == setWatches {
			t.Fatalf("set-watches request written: %v; the gate opened by timeout: %v", setWatches, timedOut)
		}
		_ = c.Close()
		_ = server.Close()
	}
}
