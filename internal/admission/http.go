package admission

import (
	"log/slog"
	"net"
	"net/http"
	"time"
)

// The bounds of an HTTP listener (the console, /metrics, /healthz,
// /prometheus/sd). A browser opens about six connections to a host and one
// per event stream it follows; Prometheus one or two.
const (
	// httpConnections bounds the connections of one listener, before
	// Connections lowers it to the process's file budget.
	httpConnections = 1024
	// httpShare bounds the connections of one client group.
	httpShare = 64
	// httpReserve is how many connections only a client holding none may
	// take.
	httpReserve = 64
	// httpHeaderTimeout bounds the time a connection takes to send a
	// request's headers (and its TLS handshake), the first request's
	// included: a connection that sends nothing is closed.
	httpHeaderTimeout = 5 * time.Second
	// httpIdleTimeout bounds the time a kept-alive connection waits for
	// its next request.
	httpIdleTimeout = 60 * time.Second
)

// HTTP is an HTTP server for h on lis with the admission every Muster
// HTTP listener has: its connections admitted by a Pool (at most 1,024;
// 64 per client group; the last 64 for clients that hold none; 8 more for
// clients at 127.0.0.1 and ::1; all of them within a quarter of the
// process's file-descriptor limit: Split), 5 s to
// send a request's headers, 60 s idle between requests. Its Serve serves
// Listener, not lis: use Serve, never the http.Server's own.
type HTTP struct {
	*http.Server
	Listener *Listener
}

// NewHTTP returns the server of h on lis, logging refused connections to
// log. ipv4Bits groups IPv4 clients by a prefix of that many bits, as
// Pool.IPv4Bits does (0: each address is a client).
func NewHTTP(lis net.Listener, h http.Handler, log *slog.Logger, ipv4Bits int) *HTTP {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	places := Split(httpConnections, LoopbackPlaces)
	pool := &Pool{What: "connections", Max: places[0], Share: httpShare, Reserve: min(httpReserve, places[0]/4), Loopback: places[1], IPv4Bits: ipv4Bits}
	return &HTTP{
		Server: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: httpHeaderTimeout,
			IdleTimeout:       httpIdleTimeout,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		Listener: NewListener(lis, pool, log),
	}
}

// Serve serves until the server is closed; it returns what
// http.Server.Serve returns.
func (s *HTTP) Serve() error { return s.Server.Serve(s.Listener) }
