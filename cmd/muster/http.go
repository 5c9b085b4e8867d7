package main

import (
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/musterhq/muster/internal/admission"
)

// httpListener is an HTTP server of the command, serving through the
// admission every listener of the command has (admission.NewHTTP).
type httpListener struct {
	addr string     // where it listens
	done chan error // receives Serve's error once it returns
	srv  *admission.HTTP
}

// serveHTTP serves h on addr. With reg, it registers there the gauge of
// connections held and the counter of those refused, labelled with the
// listener's address.
func serveHTTP(addr string, h http.Handler, reg prometheus.Registerer, log *slog.Logger) (*httpListener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &httpListener{addr: lis.Addr().String(), done: make(chan error, 1), srv: admission.NewHTTP(lis, h, log)}
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
