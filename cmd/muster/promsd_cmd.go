package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/registry/etcd"
)

// defaultPromSDListen is where muster promsd listens unless --listen says
// otherwise: loopback, beside serve's 2381.
const defaultPromSDListen = "127.0.0.1:2382"

// promSDOptions are the flags of muster promsd.
type promSDOptions struct {
	listen  string
	hosts   []string       // --listen-host
	clients clientGrouping // --client-ipv4-prefix
}

func newPromSDCmd(g *globalOptions) *cobra.Command {
	o := promSDOptions{}
	cmd := &cobra.Command{
		Use:   "promsd",
		Short: "Serve Prometheus's HTTP service discovery of the registry at --endpoints, reading only",
		Long: `Promsd answers Prometheus's HTTP service discovery (http_sd_configs) of every
registered instance at http://<listen>/prometheus/sd, as muster serve and
muster console do (docs/PROMETHEUS.md), and nothing else but /metrics,
/livez and /readyz (docs/HEALTH.md) and /healthz: it only reads the registry, so its etcd user needs read access to
the services' prefix and no more (the role viewer or gateway of
docs/SECURITY.md), and it offers no action. Run it where Prometheus can
reach it, apart from a console that holds a user able to write.`,
		Example: `  muster promsd --endpoints https://etcd-1:2379 --cacert ca.pem --user prometheus --password-file /etc/muster/prometheus.pw
  muster promsd --listen 10.0.0.5:2382 --listen-host promsd.internal`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(o.listen); err != nil {
				return usageErrorf("--listen %q: want host:port: %v", o.listen, err)
			}
			if err := o.clients.validate(); err != nil {
				return err
			}
			return runPromSD(cmd.Context(), g, o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", defaultPromSDListen, "host:port to serve /prometheus/sd, /metrics, /livez, /readyz and /healthz on")
	f.StringSliceVar(&o.hosts, "listen-host", nil, "host names (or IP addresses) the listener answers to, beside loopback ones and its own address, comma-separated or repeated: the names Prometheus reaches it by (others get 421, against DNS rebinding)")
	o.clients.addFlag(cmd)
	return cmd
}

// runPromSD serves the Prometheus service discovery of g's registry on
// o.listen until ctx ends.
func runPromSD(ctx context.Context, g *globalOptions, o promSDOptions, stderr io.Writer) error {
	log := g.log.logger(stderr, slog.LevelInfo)
	cfg, err := g.clientConfig()
	if err != nil {
		return err
	}
	cfg.Logger = etcd.ClientLogger(log)
	sd, listing, stopSD, err := startPrometheusSD(cfg, g.prefix, log)
	if err != nil {
		return fmt.Errorf("promsd: %w", err)
	}
	defer stopSD()
	l, err := serveMetrics(httpServing{
		addr: o.listen, hosts: hostFlag{"--listen-host", o.hosts},
		health:  health.New(nil, listing.State),
		routes:  []route{sd},
		clients: o.clients,
	}, log)
	if err != nil {
		return fmt.Errorf("promsd: --listen %s: %w", o.listen, err)
	}
	defer l.stop()
	addr := l.addr
	log.Info("Prometheus service discovery on http://" + addr + prometheusSDPath + ", metrics on http://" + addr + "/metrics")
	<-ctx.Done()
	log.Info("stopping")
	return nil
}
