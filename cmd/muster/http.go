package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/musterhq/muster/internal/admission"
	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/internal/hostguard"
)

// httpListener is an HTTP server of the command, serving through the
// admission every listener of the command has (admission.NewHTTP).
type httpListener struct {
	addr string     // where it listens
	done chan error // receives Serve's error once it returns
	srv  *admission.HTTP
}

// clientGrouping is --client-ipv4-prefix, which every command that opens
// a listener has: how many first bits of an IPv4 address make one client
// for the limits per client of each listener (connections, streams, event
// streams, logins). 0 until the flag is added.
type clientGrouping int

func (c *clientGrouping) addFlag(cmd *cobra.Command) {
	cmd.Flags().IntVar((*int)(c), "client-ipv4-prefix", 32,
		"IPv4 clients count as one client per prefix of this many bits for the limits each listener sets per client (8..32; 24: one client per /24, for clients that draw their addresses from a range); IPv6 clients count per /64")
}

// validate checks the flag's value; 0 (options made without the flag)
// means each address is a client, as 32 does.
func (c clientGrouping) validate() error {
	if c != 0 && (c < 8 || c > 32) {
		return usageErrorf("--client-ipv4-prefix %d: want 8..32", int(c))
	}
	return nil
}

// serveHTTP serves h on addr, grouping IPv4 clients by their first
// ipv4Bits bits. With reg, it registers there the gauge of connections
// held and the counter of those refused, labelled with the listener's
// address.
func serveHTTP(addr string, h http.Handler, reg prometheus.Registerer, log *slog.Logger, ipv4Bits clientGrouping) (*httpListener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &httpListener{addr: lis.Addr().String(), done: make(chan error, 1), srv: admission.NewHTTP(lis, h, log, int(ipv4Bits))}
	if reg != nil {
		pool, labels := l.srv.Listener.Pool(), prometheus.Labels{"listen": l.addr}
		if err := errors.Join(
			reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "muster_http_connections", ConstLabels: labels,
				Help: "Connections the HTTP listener holds."}, func() float64 { return float64(pool.Held()) })),
			reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "muster_http_connections_refused_total", ConstLabels: labels,
				Help: "Connections the HTTP listener closed at once: their client held its share, or every place was taken."},
				func() float64 { return float64(pool.Refused()) })),
		); err != nil {
			_ = lis.Close()
			return nil, err
		}
	}
	go func() { l.done <- l.srv.Serve() }()
	return l, nil
}

// stop closes the server and its connections and waits for Serve to
// return.
func (l *httpListener) stop() {
	_ = l.srv.Close()
	<-l.done
}

// httpServing is what serveMetrics serves on a listener of the command.
type httpServing struct {
	// addr is where it listens (host:port).
	addr string
	// hosts are the hosts it answers to beside loopback and its own
	// address, and the flag that names them; what is how its 421 answer
	// names it ("muster: this listener" when empty).
	hosts hostFlag
	what  string
	// extra are metrics served beside the default registry's.
	extra prometheus.Gatherer
	// healthz is /healthz: 200 "ok" while it returns nil, 503 with its
	// error otherwise; nil for always "ok".
	healthz func() error
	// health answers /livez and /readyz.
	health *health.Checker
	// routes are more handlers.
	routes []route
	// clients is --client-ipv4-prefix.
	clients clientGrouping
}

// serveMetrics serves the process's Prometheus metrics (the default
// registry's: etcd's own among them) and those of s.extra on /metrics,
// /healthz (the old name of the health check: see httpServing.healthz),
// /livez and /readyz (package health) and s.routes, to the hosts of
// s.hosts (loopback, the listener's IP and the names given; others get
// 421, against DNS rebinding), through the admission every listener of
// the command has (serveHTTP).
func serveMetrics(s httpServing, log *slog.Logger) (*httpListener, error) {
	guard, err := hostguard.New(s.addr, s.hosts.names...)
	if err != nil {
		return nil, usageErrorf("%s: %v", s.hosts.flag, err)
	}
	mux := http.NewServeMux()
	own := prometheus.NewRegistry()
	gatherers := prometheus.Gatherers{prometheus.DefaultGatherer, own}
	if s.extra != nil {
		gatherers = append(gatherers, s.extra)
	}
	mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(prometheus.DefaultRegisterer,
		promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if s.healthz != nil {
			if err := s.healthz(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	s.health.Register(mux)
	for _, r := range s.routes {
		mux.Handle(r.pattern, r.handler)
	}
	what := s.what
	if what == "" {
		what = "muster: this listener"
	}
	return serveHTTP(s.addr, guard.Handler(what, s.hosts.flag, mux), own, log, s.clients)
}
