package zktest

import (
	"net"
	"sync"
)

// proxy forwards TCP connections to a target and can stall them, as a
// partition does: bytes wait (in the proxy or the kernel's buffers), none
// is lost.
type proxy struct {
	ln net.Listener

	mu      sync.Mutex
	target  string // set by retarget before the first connection
	stalled bool
	healed  chan struct{} // closed when a stall ends; replaced by stall
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// newProxy listens on a port of its own at once, so that the ports picked
// afterwards for the servers cannot be its own.
func newProxy() (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.healed)
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// retarget makes new connections go to target.
func (p *proxy) retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// gate returns a channel that is closed when bytes may flow.
func (p *proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healed
}

func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stalled {
		p.stalled = true
		p.healed = make(chan struct{})
	}
}

func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.healed)
	}
}

// track records c so that close can end it; it reports false once the
// proxy is closed.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// resetConns closes every open connection, as the death of the server's
// process does.
func (p *proxy) resetConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.heal()
	p.resetConns()
	p.mu.Lock()
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *proxy) handle(c net.Conn) {
	defer p.wg.Done()
	<-p.gate()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	out, err := net.Dial("tcp", target)
	if err != nil || !p.track(out) {
		_ = c.Close()
		if out != nil {
			_ = out.Close()
		}
		return
	}
	p.wg.Add(2)
	go p.pipe(c, out)
	go p.pipe(out, c)
}

// pipe copies src to dst, holding each chunk while the proxy is stalled;
// when either side ends, both are closed.
func (p *proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	defer func() { _ = src.Close(); _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
