//go:build linux

package admission

import (
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/mem"
)

// readyReader reads a TCP connection into a buffer taken from a pool only
// once the socket has bytes to read, so that an idle connection pins no
// buffer. Its fields hold one read's request and result (a connection has
// one reader at a time, gRPC's), so that a read allocates nothing.
type readyReader struct {
	raw  syscall.RawConn // nil: read through the net.Conn
	read func(fd uintptr) bool

	size int
	pool mem.BufferPool
	buf  *[]byte
	n    int
	err  error
}

func newReadyReader(c net.Conn) readyReader {
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return readyReader{}
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return readyReader{}
	}
	return readyReader{raw: raw}
}

// ReadOnReady is the optional method of a net.Conn through which gRPC's
// transport reads without a buffer of its own per connection: it waits
// until c has bytes to read, then reads up to size of them into a buffer
// from pool, which the caller puts back. It returns io.EOF when the peer
// closed c, and the connection's deadline errors as Read does.
func (c *conn) ReadOnReady(size int, pool mem.BufferPool) (*[]byte, int, error) {
	r := &c.ready
	if r.raw == nil {
		buf := pool.Get(size)
		n, err := c.Conn.Read(*buf)
		if n == 0 {
			pool.Put(buf)
			return nil, 0, err
		}
		return buf, n, err
	}
	if r.read == nil {
		r.read = r.tryRead
	}
	r.size, r.pool = size, pool
	err := r.raw.Read(r.read)
	buf, n, readErr := r.buf, r.n, r.err
	r.pool, r.buf, r.n, r.err = nil, nil, 0, nil
	switch {
	case err != nil: // the connection is closed or its deadline passed
		if buf != nil {
			pool.Put(buf)
		}
		return nil, 0, err
	case readErr != nil:
		return nil, 0, readErr
	case n == 0:
		pool.Put(buf)
		return nil, 0, io.EOF
	}
	return buf, n, nil
}

// tryRead is the callback of syscall.RawConn.Read: it reads what the
// socket holds, or reports that it would block (the runtime then waits
// for the socket to be readable and calls it again), with no buffer held
// while it waits.
func (r *readyReader) tryRead(fd uintptr) bool {
	buf := r.pool.Get(r.size)
	n, err := syscall.Read(int(fd), *buf)
	if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
		r.pool.Put(buf)
		return false
	}
	if err != nil {
		r.pool.Put(buf)
		r.err = err
		return true
	}
	r.buf, r.n = buf, n
	return true
}
