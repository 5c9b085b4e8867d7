package zookeeper

import (
	"encoding/binary"
	"net"
	"sync"
	"time"
)

// handshakeConn bounds the session handshake on a new connection. The
// client library gives the handshake ten times its read timeout (6.7
// session timeouts), and a frozen server's kernel still accepts
// connections: a client that reconnected to a frozen server would wait
// there until its session expired, although other servers answer. Until
// the connect response (a 4-byte length and that many bytes) has been
// read, every deadline the library sets is brought forward to at most
// limit from now; after it, deadlines are the library's own.
//
// It also works around a data race of the library (go-zookeeper/zk v1.0.4,
// its pull request 35): after a reconnection the connection's goroutine
// reads the last zxid seen to re-arm the watches while the new receiving
// goroutine may already write it for a response. Here the receiving side
// reads nothing after the handshake until the library has written its
// set-watches request (which it builds after that read), or at most
// gateWait (a connection with no watch to re-arm sends none).
type handshakeConn struct {
	net.Conn
	limit time.Duration

	mu sync.Mutex
	hs handshake

	gate     chan struct{} // closed when the receiving side may go on
	gateOnce sync.Once
	timedOut bool // the gate opened after gateWait; guarded by mu
}

// gateWait bounds how long the first read after the handshake waits for
// the set-watches request.
const gateWait = 200 * time.Millisecond

// opSetWatches is the opcode of ZooKeeper's set-watches request.
const opSetWatches = 101

func (c *handshakeConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	done := c.hs.done()
	c.mu.Unlock()
	if done {
		c.waitGate()
	}
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.hs.read(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *handshakeConn) Write(p []byte) (int, error) {
	// A request is written whole: length, xid, opcode, body. It was
	// built after the read the gate waits for.
	if len(p) >= 12 && binary.BigEndian.Uint32(p[8:12]) == opSetWatches {
		c.openGate()
	}
	return c.Conn.Write(p)
}

func (c *handshakeConn) openGate() { c.gateOnce.Do(func() { close(c.gate) }) }

func (c *handshakeConn) waitGate() {
	select {
	case <-c.gate:
		return
	default:
	}
	t := time.NewTimer(gateWait)
	defer t.Stop()
	select {
	case <-c.gate:
	case <-t.C:
		c.mu.Lock()
		c.timedOut = true
		c.mu.Unlock()
		c.openGate()
	}
}

func (c *handshakeConn) SetDeadline(t time.Time) error {
	return c.Conn.SetDeadline(c.bound(t))
}

func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.bound(t))
}

func (c *handshakeConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.bound(t))
}

func (c *handshakeConn) bound(t time.Time) time.Time {
	c.mu.Lock()
	done := c.hs.done()
	c.mu.Unlock()
	return boundDeadline(t, time.Now(), c.limit, done)
}

// boundDeadline returns deadline t, brought forward to now+limit while the
// handshake is not done (a zero t means none).
func boundDeadline(t, now time.Time, limit time.Duration, done bool) time.Time {
	if done {
		return t
	}
	if latest := now.Add(limit); t.IsZero() || t.After(latest) {
		return latest
	}
	return t
}

// handshake counts the bytes of the connect response as they are read.
type handshake struct {
	header [4]byte
	n      int // bytes read so far
	need   int // length of the response, header included; 0 until known
}

func (h *handshake) read(p []byte) {
	for len(p) > 0 && !h.done() {
		if h.n < len(h.header) {
			k := copy(h.header[h.n:], p)
			h.n += k
			p = p[k:]
			if h.n == len(h.header) {
				h.need = len(h.header) + int(binary.BigEndian.Uint32(h.header[:]))
			}
			continue
		}
		k := min(len(p), h.need-h.n)
		h.n += k
		p = p[k:]
	}
}

func (h *handshake) done() bool { return h.need > 0 && h.n >= h.need }

// handshakeDialer returns a dialer for the client library whose
// connections bound their handshake to limit.
func handshakeDialer(limit time.Duration) func(network, address string, timeout time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &handshakeConn{Conn: c, limit: limit, gate: make(chan struct{})}, nil
	}
}
