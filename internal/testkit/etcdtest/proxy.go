package etcdtest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// proxyDialTimeout bounds the proxy's dial to its target.
	proxyDialTimeout = time.Second
	// proxyChunkSize is the largest chunk the proxy reads at once.
	proxyChunkSize = 32 << 10
	// proxyQueueLen is how many chunks a direction of a connection holds
	// at most (while delayed or stalled) before the proxy stops reading
	// and TCP flow control holds the rest in the kernel buffers.
	proxyQueueLen = 64
)

// proxy is a TCP forwarder with the faults a network or a machine
// produces: it can stall (forward nothing, lose nothing), reset (every
// connection gets a TCP RST, new ones too) and delay (every chunk arrives
// d late, in order). It never drops bytes inside a connection that stays
// open.
//
// Each member has one in front of its client port (the faults of Member)
// and one in front of its peer port, which only ever closes its
// connections (closeConns) when the member stops, as the death of its
// process would; without that, etcd's peer HTTP server can keep a
// connection, and the goroutines of both ends, for up to
// rafthttp.ConnReadTimeout (5s) after it was closed.
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	closed  bool
	stalled bool
	reset   bool
	delay   time.Duration
	changed chan struct{} // closed and replaced when the fault state changes
	conns   map[*proxyConn]struct{}
	wg      sync.WaitGroup

	accepted atomic.Int64 // connections accepted, for tests
}

// proxyConn is one connection through the proxy: the accepted one and,
// once dialled, the one to the target.
type proxyConn struct {
	in   net.Conn
	done chan struct{} // closed by shut

	mu     sync.Mutex
	out    net.Conn // nil until dialled
	isShut bool
}

// setOut records the connection to the target; it reports false if c was
// shut meanwhile.
func (c *proxyConn) setOut(out net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isShut {
		return false
	}
	c.out = out
	return true
}

// shut closes both ends; with rst, as a TCP reset (SO_LINGER 0). Later
// calls do nothing.
func (c *proxyConn) shut(rst bool) {
	c.mu.Lock()
	if c.isShut {
		c.mu.Unlock()
		return
	}
	c.isShut = true
	out := c.out
	c.mu.Unlock()
	for _, conn := range []net.Conn{c.in, out} {
		if conn == nil {
			continue
		}
		if tc, ok := conn.(*net.TCPConn); ok && rst {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
	}
	close(c.done)
}

// newProxy listens on addr and forwards every connection to target.
func newProxy(addr, target string) (*proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, changed: make(chan struct{}), conns: make(map[*proxyConn]struct{})}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// setFaults changes the fault state and wakes every waiting copy.
func (p *proxy) setFaults(f func()) {
	p.mu.Lock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// stall stops forwarding in both directions; bytes already read wait in
// the proxy, the rest in the kernel buffers.
func (p *proxy) stall() { p.setFaults(func() { p.stalled = true }) }

// delayBy delays every chunk by d from the moment the proxy reads it.
func (p *proxy) delayBy(d time.Duration) { p.setFaults(func() { p.delay = d }) }

// resetAll resets every connection and every new one until heal.
func (p *proxy) resetAll() {
	p.setFaults(func() { p.reset = true })
	p.shutConns(true)
}

// heal ends every fault; held chunks are forwarded at once, in order.
func (p *proxy) heal() {
	p.setFaults(func() { p.stalled, p.reset, p.delay = false, false, 0 })
}

// closeConns closes every connection through the proxy (a FIN, not a
// reset). New connections are still accepted.
func (p *proxy) closeConns() { p.shutConns(false) }

func (p *proxy) shutConns(rst bool) {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.shut(rst)
	}
}

// close stops accepting, closes every connection and waits for the
// proxy's goroutines to end. It is safe to call more than once.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.closeConns()
	p.wg.Wait()
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // temporary failure, e.g. out of file descriptors
		}
		p.accepted.Add(1)
		c := &proxyConn{in: in, done: make(chan struct{})}
		p.mu.Lock()
		closed, reset := p.closed, p.reset
		if !closed && !reset {
			p.conns[c] = struct{}{}
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if closed || reset {
			c.shut(reset)
			if closed {
				return
			}
			continue
		}
		go p.handle(c)
	}
}

// wait blocks while the proxy is stalled and, if readAt is not zero, until
// the delay after readAt has passed (re-evaluated as the delay changes:
// heal ends a delay at once). It reports false if c was shut meanwhile.
func (p *proxy) wait(c *proxyConn, readAt time.Time) bool {
	for {
		p.mu.Lock()
		stalled, d, changed := p.stalled, p.delay, p.changed
		p.mu.Unlock()
		var timer <-chan time.Time
		var t *time.Timer
		switch {
		case stalled:
		case readAt.IsZero() || time.Until(readAt.Add(d)) <= 0:
			select {
			case <-c.done:
				return false
			default:
				return true
			}
		default:
			t = time.NewTimer(time.Until(readAt.Add(d)))
			timer = t.C
		}
		shut := false
		select {
		case <-c.done:
			shut = true
		case <-changed:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if shut {
			return false
		}
	}
}

// handle dials the target once the proxy flows (a stalled proxy accepts
// connections but nothing reaches the target) and copies both ways until
// either side closes. If the target refuses, c is reset, as a connection
// to a closed port would be.
func (p *proxy) handle(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.shut(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if !p.wait(c, time.Time{}) {
		return
	}
	out, err := net.DialTimeout("tcp", p.target, proxyDialTimeout)
	if err != nil {
		c.shut(true)
		return
	}
	if !c.setOut(out) { // shut while dialling
		_ = out.Close()
		return
	}
	p.mu.Lock()
	reset := p.reset
	p.mu.Unlock()
	if reset {
		c.shut(true)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(c, c.in, out) })
	wg.Go(func() { p.pipe(c, out, c.in) })
	wg.Wait()
}

// chunk is data read from one side, with the time it was read.
type chunk struct {
	data []byte
	at   time.Time
}

// pipe copies src to dst: one goroutine reads, the other writes each
// chunk once its delay has passed and the proxy is not stalled, so chunks
// keep their order and a delay is latency, not a lower bandwidth. When
// either side fails, c is shut (both ends), which ends the other pipe.
func (p *proxy) pipe(c *proxyConn, src, dst net.Conn) {
	q := make(chan chunk, proxyQueueLen)
	go func() {
		defer close(q)
		for {
			if !p.wait(c, time.Time{}) { // a stalled proxy stops reading
				return
			}
			buf := make([]byte, proxyChunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case q <- chunk{data: buf[:n], at: time.Now()}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		c.shut(false)
		for range q { // the reader ends once c is shut
		}
	}()
	for ch := range q {
		if !p.wait(c, ch.at) {
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			return
		}
	}
}
