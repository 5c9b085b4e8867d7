package etcdtest

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// forwarderDialTimeout bounds the forwarder's dial to its target.
const forwarderDialTimeout = time.Second

// forwarder is a plain TCP forwarder that can cut all its connections at
// once. Members reach each other's peer ports through forwarders so that
// stopping a member, and closing a cluster, closes the raft connections to
// it at once, as the death of a process would. Without that, etcd's peer
// HTTP server can keep a connection, and the goroutines of both ends, for up
// to rafthttp.ConnReadTimeout (5s) after it was closed.
type forwarder struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// newForwarder listens on addr and forwards every connection to target.
func newForwarder(addr, target string) (*forwarder, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f := &forwarder{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		in, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // temporary failure, e.g. out of file descriptors
		}
		if !f.track(in) {
			in.Close()
			return
		}
		f.wg.Add(1)
		go f.handle(in)
	}
}

// handle forwards in to the target until either side closes. If the target
// is down, in is closed at once, so the peer sees the connection fail.
func (f *forwarder) handle(in net.Conn) {
	defer f.wg.Done()
	defer f.untrack(in)
	out, err := net.DialTimeout("tcp", f.target, forwarderDialTimeout)
	if err != nil {
		return
	}
	if !f.track(out) {
		out.Close()
		return
	}
	defer f.untrack(out)
	done := make(chan struct{})
	go func() {
		io.Copy(out, in)
		// Closing both ends ends the other copy too.
		in.Close()
		out.Close()
		close(done)
	}()
	io.Copy(in, out)
	in.Close()
	out.Close()
	<-done
}

// track records c so that dropConns can close it; it reports false if the
// forwarder is closed.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

// untrack closes c and forgets it.
func (f *forwarder) untrack(c net.Conn) {
	c.Close()
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// dropConns closes every connection through the forwarder. New connections
// are still accepted.
func (f *forwarder) dropConns() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
	}
}

// close stops accepting, closes every connection and waits for the
// forwarder's goroutines to end. It is safe to call more than once.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.ln.Close()
	f.dropConns()
	f.wg.Wait()
}
