package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/musterhq/muster/internal/embedetcd"
)

// defaultDataDir is serve's data directory, relative to the working
// directory.
const defaultDataDir = "muster.etcd"

// serveOptions are the flags of muster serve.
type serveOptions struct {
	dataDir   string
	clientURL string
	peerURL   string
	name      string
	// metricsAddr is where /metrics and /healthz are served; empty: not
	// served.
	metricsAddr string
}

func (o *serveOptions) validate() error {
	if o.dataDir == "" {
		return usageErrorf("--data-dir: must not be empty")
	}
	if o.name == "" {
		return usageErrorf("--name: must not be empty")
	}
	if _, err := embedetcd.ParseURL("client", o.clientURL); err != nil {
		return usageErrorf("--listen-client-url: %v", err)
	}
	if _, err := embedetcd.ParseURL("peer", o.peerURL); err != nil {
		return usageErrorf("--listen-peer-url: %v", err)
	}
	if o.clientURL == o.peerURL {
		return usageErrorf("--listen-client-url and --listen-peer-url must differ")
	}
	return nil
}

func newServeCmd() *cobra.Command {
	o := serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an embedded single-node etcd as the registry",
		Long: `Serve runs a single-node etcd server inside this process, for servers to
register in and clients to discover from. It keeps its data in --data-dir
(by default ./` + defaultDataDir + `, relative to the working directory), so a
restart keeps the registrations that have not expired.

It logs one "ready" line on stderr once clients can connect, and stops
cleanly on SIGINT or SIGTERM. For production, run a real etcd cluster and
point --endpoints at it instead.`,
		Example: `  muster serve
  muster serve --data-dir /var/lib/muster --listen-client-url http://0.0.0.0:2379`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return runServe(cmd.Context(), o, cmd.ErrOrStderr(), nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", defaultDataDir, "directory for etcd's data, created if missing")
	f.StringVar(&o.clientURL, "listen-client-url", embedetcd.DefaultClientURL, "URL to listen on for clients")
	f.StringVar(&o.peerURL, "listen-peer-url", embedetcd.DefaultPeerURL, "URL to listen on for etcd peers")
	f.StringVar(&o.name, "name", embedetcd.DefaultName, "etcd member name; keep it the same for a data directory")
	f.StringVar(&o.metricsAddr, "metrics-listen", "127.0.0.1:2381", "host:port to serve Prometheus /metrics and /healthz on; empty to not serve them")
	return cmd
}

// runServe runs an embedded etcd as o says until ctx ends, then stops it
// and returns nil. It logs to stderr. Once the server accepts clients it
// calls ready, if not nil, with the endpoint clients use. It returns an
// error if the server cannot start (address in use, unusable data
// directory) or stops on its own.
func runServe(ctx context.Context, o serveOptions, stderr io.Writer, ready func(endpoint string)) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	srv, err := embedetcd.Start(ctx, embedetcd.Config{
		Dir:       o.dataDir,
		Name:      o.name,
		ClientURL: o.clientURL,
		PeerURL:   o.peerURL,
		Logger:    embedetcd.ErrorLogger(stderr),
	})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// Interrupted while starting: not a failure.
		return nil
	case errors.Is(err, embedetcd.ErrAddrInUse):
		return fmt.Errorf("serve: %w\n(is another muster serve or etcd running? choose free ports with --listen-client-url and --listen-peer-url)", err)
	case errors.Is(err, embedetcd.ErrDataDir):
		return fmt.Errorf("serve: --data-dir %s: %w", o.dataDir, err)
	default:
		return fmt.Errorf("serve: %w", err)
	}

	if o.metricsAddr != "" {
		stop, addr, err := serveMetrics(o.metricsAddr, srv)
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("serve: --metrics-listen %s: %w", o.metricsAddr, err)
		}
		defer stop()
		log.Info("metrics on http://" + addr + "/metrics, health on http://" + addr + "/healthz")
	}
	log.Info("ready, clients use --endpoints "+srv.Endpoint(), "data_dir", o.dataDir, "name", o.name)
	if ready != nil {
		ready(srv.Endpoint())
	}

	select {
	case <-ctx.Done():
		log.Info("stopping")
		if err := srv.Close(); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		log.Info("stopped")
		return nil
	case <-srv.Done():
		_ = srv.Close()
		return fmt.Errorf("serve: etcd stopped: %w", srv.Err())
	}
}

// serveMetrics serves the process's Prometheus metrics (etcd's own among
// them) on /metrics, and /healthz: 200 "ok" while the embedded etcd runs,
// 503 once it has stopped. It returns a function that stops serving and the
// address it listens on.
func serveMetrics(addr string, srv *embedetcd.Server) (stop func(), listening string, err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-srv.Done():
			http.Error(w, "etcd stopped", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(lis)
	}()
	return func() {
		_ = hs.Close()
		<-done
	}, lis.Addr().String(), nil
}
