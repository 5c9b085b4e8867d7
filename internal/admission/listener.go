package admission

import (
	"log/slog"
	"net"
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
type Listener struct {
	net.Listener
	pool *Pool
	log  *slog.Logger
	rate ratelimit.Bucket
}

// NewListener returns lis admitting its connections through p, logging
// refusals to log (nil: not logged).
func NewListener(lis net.Listener, p *Pool, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: lis, pool: p, log: log, rate: ratelimit.Bucket{Burst: 10, Every: time.Second}}
}

// Accept returns the next connection the pool admits, closing those it
// refuses; it returns the error of the underlying Accept.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, err := l.pool.Acquire(c.RemoteAddr().String())
		if err != nil {
			_ = c.Close()
			if ok, held := l.rate.Allow(time.Now()); ok {
				l.log.Warn("connection refused", "listener", l.Addr().String(), "client", l.pool.Group(c.RemoteAddr().String()),
					"error", err, "suppressed_before", held)
			}
			continue
		}
		return newConn(c, release), nil
	}
}

// Pool returns the pool that admits the listener's connections.
func (l *Listener) Pool() *Pool { return l.pool }

// conn gives its place back when closed (release gives one back once).
// On Linux it also lets gRPC read it without a buffer of its own
// (ready_linux.go): a wrapper of a *net.TCPConn otherwise costs gRPC's
// transport a 32 KiB read buffer for as long as the connection lives.
type conn struct {
	net.Conn
	release func()
	ready   readyReader // reads on readiness; the zero value when unavailable
}

func newConn(c net.Conn, release func()) *conn {
	return &conn{Conn: c, release: release, ready: newReadyReader(c)}
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
