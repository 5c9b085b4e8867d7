package admission

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/musterhq/muster/internal/ratelimit"
)

// Listener admits the connections its net.Listener accepts through a
// Pool: a connection the pool refuses is closed as soon as it is accepted,
// counted in the pool's Refused and logged (a burst of 10 lines, then one
// a second, each saying how many it follows); an admitted one gives its
// place back when it is closed. Deadlines are the server's: an HTTP
// server's ReadHeaderTimeout and IdleTimeout, a gRPC server's
// ConnectionTimeout.
//
// A Listener made by NewTLSListener admits in two steps: a connection
// holds a place among the handshakes in progress until its TLS handshake
// succeeds (Establish, called by Credentials), and only then one among
// the connections; a client that never finishes a handshake (one without
// a certificate, where one is required) never holds a connection's place.
type Listener struct {
	net.Listener
	pool       *Pool
	handshakes *Pool // nil: a connection takes its place in pool at accept
	log        *slog.Logger
	rate       ratelimit.Bucket
}

// NewListener returns lis admitting its connections through p, logging
// refusals to log (nil: not logged).
func NewListener(lis net.Listener, p *Pool, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: lis, pool: p, log: log, rate: ratelimit.Bucket{Burst: 10, Every: time.Second}}
}

// NewTLSListener returns lis admitting each connection first through
// handshakes, from its accept until Establish moves it into conns after
// its TLS handshake; refusals of both are logged to log (nil: not
// logged). Its connections must be served with Credentials: one never
// established keeps its handshake's place until it is closed.
func NewTLSListener(lis net.Listener, handshakes, conns *Pool, log *slog.Logger) *Listener {
	l := NewListener(lis, conns, log)
	l.handshakes = handshakes
	return l
}

// Accept returns the next connection the pool (the handshakes' pool of a
// NewTLSListener) admits, closing those it refuses; it returns the error
// of the underlying Accept.
func (l *Listener) Accept() (net.Conn, error) {
	first := l.pool
	if l.handshakes != nil {
		first = l.handshakes
	}
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, err := first.Acquire(c.RemoteAddr().String())
		if err != nil {
			_ = c.Close()
			l.refused(first, c, err)
			continue
		}
		ac := newConn(c, release)
		if l.handshakes != nil {
			ac.l = l
		}
		return ac, nil
	}
}

// refused logs c refused by p, rate-limited.
func (l *Listener) refused(p *Pool, c net.Conn, err error) {
	if ok, held := l.rate.Allow(time.Now()); ok {
		l.log.Warn("connection refused", "listener", l.Addr().String(), "client", p.Group(c.RemoteAddr().String()),
			"error", err, "suppressed_before", held)
	}
}

// Pool returns the pool that admits the listener's connections.
func (l *Listener) Pool() *Pool { return l.pool }

// Establish moves c, a connection of a NewTLSListener whose handshake
// succeeded, from its place among the handshakes to one among the
// connections, or returns the error that refuses it (counted in the
// connection pool's Refused and logged; the caller closes c). For any
// other connection, or one already established, it does nothing.
func Establish(c net.Conn) error {
	ac, ok := c.(*conn)
	if !ok {
		return nil
	}
	ac.mu.Lock()
	l := ac.l
	ac.l = nil
	ac.mu.Unlock()
	if l == nil {
		return nil
	}
	release, err := l.pool.Acquire(c.RemoteAddr().String())
	if err != nil {
		l.refused(l.pool, c, err)
		return fmt.Errorf("admission: %w", err)
	}
	ac.mu.Lock()
	if ac.closed {
		ac.mu.Unlock()
		release()
		return net.ErrClosed
	}
	handshake := ac.release
	ac.release = release
	ac.mu.Unlock()
	handshake()
	return nil
}

// conn gives its place back when closed (release gives one back once).
// On Linux it also lets gRPC read it without a buffer of its own
// (ready_linux.go): a wrapper of a *net.TCPConn otherwise costs gRPC's
// transport a 32 KiB read buffer for as long as the connection lives.
type conn struct {
	net.Conn
	ready readyReader // reads on readiness; the zero value when unavailable

	mu      sync.Mutex
	release func()    // gives back the place held now
	l       *Listener // while it holds a handshake's place: the listener to establish it in
	closed  bool
}

func newConn(c net.Conn, release func()) *conn {
	return &conn{Conn: c, release: release, ready: newReadyReader(c)}
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	c.closed = true
	release := c.release
	c.mu.Unlock()
	release()
	return err
}
