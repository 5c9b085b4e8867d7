package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/registry/etcd"
)

// defaultConsoleListen is where muster console serves by default.
const defaultConsoleListen = "127.0.0.1:8380"

// consolePath is where the console is mounted.
const consolePath = "/ui/"

// hostFlag is the host names a listener answers to (hostguard), beside
// loopback and its own address, and the flag that gives them.
type hostFlag struct {
	flag  string
	names []string
}

// route is one more handler for an HTTP listener.
type route struct {
	pattern string
	handler http.Handler
}

// consoleFlags are the console's flags, shared by serve and console.
type consoleFlags struct {
	// tokenFile holds the admin token; empty: none.
	tokenFile string
	// usersFile is an htpasswd file of bcrypt hashes; empty: none.
	usersFile string
	// legacy are the legacy sources the console merges (addLegacy).
	legacy layoutFlags
	// hosts are the host names the console answers to beside loopback.
	hosts []string
	// secureCookie marks the session cookie Secure (behind a TLS proxy).
	secureCookie bool
	// clusters are the etcd clusters a console over several reads
	// (muster console --cluster; serve --console-cluster, beside its own
	// registry, named ownName).
	clusters clusterFlags
	ownName  string
	// clients is --client-ipv4-prefix, for the console's limits per
	// client and its listener's.
	clients clientGrouping
}

func (c *consoleFlags) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.tokenFile, "console-admin-token-file", "",
		"file holding the web console's admin token (at least 16 bytes); without it or --console-admin-basic-auth-file the console is read-only")
	cmd.Flags().StringVar(&c.usersFile, "console-admin-basic-auth-file", "",
		"htpasswd file of bcrypt hashes (htpasswd -nB -C 12 USER) of the operators who may log in to the web console's actions with a user name and password; read again when it changes")
	cmd.Flags().StringSliceVar(&c.hosts, "console-host", nil,
		"host names (or IP addresses) the web console answers to, beside loopback ones, comma-separated or repeated: the names users and proxies reach it by (others get 421, against DNS rebinding)")
	cmd.Flags().BoolVar(&c.secureCookie, "console-secure-cookie", false,
		"mark the console's session cookie Secure (HTTPS only), for a console behind a proxy that terminates TLS")
	c.clients.addFlag(cmd)
}

// enabled reports whether an admin credential, a legacy source or
// another cluster is configured.
func (c *consoleFlags) enabled() bool {
	return c.tokenFile != "" || c.usersFile != "" || len(c.legacy.legacy) > 0 || len(c.clusters.values) > 0
}

// consoleCluster is one etcd cluster of a console over several: its name
// and the configuration of its client.
type consoleCluster struct {
	name, region string
	cfg          clientv3.Config
}

// clusterConfigs are the clusters of specs, each with the client
// configuration g and its value give (forCluster); every cluster's
// settings are checked before any file is read.
func (g *globalOptions) clusterConfigs(specs []clusterSpec) ([]consoleCluster, error) {
	for _, spec := range specs {
		if _, err := g.forCluster(spec); err != nil {
			return nil, err
		}
	}
	out := make([]consoleCluster, 0, len(specs))
	for _, spec := range specs {
		cfg, err := g.clusterClientConfig(spec)
		if err != nil {
			return nil, err
		}
		out = append(out, consoleCluster{name: spec.name, region: spec.own["region"], cfg: cfg})
	}
	return out, nil
}

// openClusters opens each cluster's registry (etcd.Open: a store with a
// client of its own) with opts; closeAll closes them.
func openClusters(cs []consoleCluster, opts ...etcd.StoreOption) (cls []console.Cluster, closeAll func(), err error) {
	closeAll = func() {
		for _, c := range cls {
			_ = c.Store.Close()
		}
	}
	for _, c := range cs {
		store, err := etcd.Open(c.cfg, opts...)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("cluster %s: etcd client for %s: %w", c.name, strings.Join(c.cfg.Endpoints, ","), err)
		}
		cls = append(cls, console.Cluster{Name: c.name, Region: c.region, Store: store})
	}
	return cls, closeAll, nil
}

// startClusters runs a console over the clusters cls (whose stores stay
// the caller's) and returns its route and the function that stops it
// (idempotent). extra are more console options.
func (c *consoleFlags) startClusters(cls []console.Cluster, prefix string, timeout time.Duration, log *slog.Logger, extra ...console.Option) (route, func(), error) {
	opts, err := c.serverOptions(prefix, timeout, log, extra)
	if err != nil {
		return route{}, nil, err
	}
	srv, err := console.NewClusters(cls, opts...)
	if err != nil {
		return route{}, nil, err
	}
	return route{pattern: consolePath, handler: srv}, sync.OnceFunc(func() { _ = srv.Close() }), nil
}

// consoleServed is what consoleAndSD starts: the console's route, the
// Prometheus service discovery's, the Discovery that follows every
// service for it (whose state /readyz reports), and the function that
// stops them all.
type consoleServed struct {
	ui, sd  route
	listing *health.Listing
	stop    func()
}

// consoleAndSD starts the console and the Prometheus service discovery of
// cfg's registry, or, given clusters (own first, if named, then
// c.clusters' with the client configurations g and their values give),
// of the union of those clusters. Its stop stops both, then closes what
// they opened.
func (c *consoleFlags) consoleAndSD(g *globalOptions, own *consoleCluster, cfg clientv3.Config, log *slog.Logger, extra ...console.Option) (consoleServed, error) {
	specs, err := c.clusters.parse()
	if err != nil {
		return consoleServed{}, err
	}
	if len(specs) == 0 {
		ui, stopUI, err := c.start(cfg, g.prefix, g.timeout, log, extra...)
		if err != nil {
			return consoleServed{}, err
		}
		sd, listing, stopSD, err := startPrometheusSD(cfg, g.prefix, log)
		if err != nil {
			stopUI()
			return consoleServed{}, fmt.Errorf("console: %w", err)
		}
		return consoleServed{ui, sd, listing, func() { stopUI(); stopSD() }}, nil
	}
	cs, err := g.clusterConfigs(specs)
	if err != nil {
		return consoleServed{}, err
	}
	if own != nil {
		cs = append([]consoleCluster{*own}, cs...)
	}
	cls, closeClients, err := openClusters(cs, consoleStoreOptions(g.prefix, g.timeout, log)...)
	if err != nil {
		return consoleServed{}, err
	}
	ui, stopUI, err := c.startClusters(cls, g.prefix, g.timeout, log, extra...)
	if err != nil {
		closeClients()
		return consoleServed{}, err
	}
	sd, listing, stopSD, err := startClustersPrometheusSD(cls, g.prefix, log)
	if err != nil {
		stopUI()
		closeClients()
		return consoleServed{}, fmt.Errorf("console: %w", err)
	}
	return consoleServed{ui, sd, listing, sync.OnceFunc(func() { stopUI(); stopSD(); closeClients() })}, nil
}

// serverOptions are the options of a console: the flags', the prefix,
// the request timeout, the logger, then extra.
func (c *consoleFlags) serverOptions(prefix string, timeout time.Duration, log *slog.Logger, extra []console.Option) ([]console.Option, error) {
	opts, err := c.options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, console.WithPrefix(prefix), console.WithRequestTimeout(timeout),
		console.WithLogger(log.With("component", "muster.console")))
	return append(opts, extra...), nil
}

// consoleStoreOptions are the options of the registry a console reads:
// the prefix, the request timeout and the console's logger, as
// serverOptions gives them to the console.
func consoleStoreOptions(prefix string, timeout time.Duration, log *slog.Logger) []etcd.StoreOption {
	return []etcd.StoreOption{etcd.WithPrefix(prefix), etcd.WithRequestTimeout(timeout),
		etcd.WithLogger(log.With("component", "muster.console"))}
}

// options are the console options the flags ask for; reading the files'
// errors are usage errors.
func (c *consoleFlags) options() ([]console.Option, error) {
	opts, err := c.legacy.consoleOptions()
	if err != nil {
		return nil, err
	}
	if c.tokenFile != "" {
		data, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, usageErrorf("--console-admin-token-file: %v", err)
		}
		token := strings.TrimSpace(string(data))
		if len(token) < 16 {
			return nil, usageErrorf("--console-admin-token-file %s: the token has %d bytes, want at least 16", c.tokenFile, len(token))
		}
		opts = append(opts, console.WithAdminToken(token))
	}
	if len(c.hosts) > 0 {
		opts = append(opts, console.WithAllowedHosts(c.hosts...))
	}
	if c.secureCookie {
		opts = append(opts, console.WithSecureCookie())
	}
	if c.clients > 0 {
		opts = append(opts, console.WithClientIPv4Prefix(int(c.clients)))
	}
	if c.usersFile != "" {
		data, err := os.ReadFile(c.usersFile)
		if err != nil {
			return nil, usageErrorf("--console-admin-basic-auth-file: %v", err)
		}
		if err := console.ValidateAdminUsers(string(data)); err != nil {
			return nil, usageErrorf("--console-admin-basic-auth-file %s: %v", c.usersFile, err)
		}
		opts = append(opts, console.WithAdminUsersFile(c.usersFile))
	}
	return opts, nil
}

// start runs a console on its own etcd client (cfg) and returns its route
// and the function that stops it (idempotent).
// extra are more console options.
func (c *consoleFlags) start(cfg clientv3.Config, prefix string, timeout time.Duration, log *slog.Logger, extra ...console.Option) (route, func(), error) {
	opts, err := c.serverOptions(prefix, timeout, log, extra)
	if err != nil {
		return route{}, nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return route{}, nil, fmt.Errorf("console: etcd client: %w", err)
	}
	store, err := etcd.NewStore(cli, consoleStoreOptions(prefix, timeout, log)...)
	if err != nil {
		cli.Close()
		return route{}, nil, fmt.Errorf("console: %w", err)
	}
	srv, err := console.New(store, opts...)
	if err != nil {
		_ = store.Close()
		cli.Close()
		return route{}, nil, err
	}
	stop := sync.OnceFunc(func() {
		_ = srv.Close()
		_ = store.Close()
		_ = cli.Close()
	})
	return route{pattern: consolePath, handler: srv}, stop, nil
}

// consoleOptions are the flags of muster console.
type consoleOptions struct {
	listen string
	consoleFlags
}

func newConsoleCmd(g *globalOptions) *cobra.Command {
	o := consoleOptions{}
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console for the registry at --endpoints",
		Long: `Console serves a web console at http://<listen>/ui/ for the registry in the
etcd cluster given by --endpoints (the same flags as every command): the
services, their instances live as they change, and the stale state when etcd
does not answer. muster serve serves the same console on its --metrics-listen
address. Both also answer Prometheus's HTTP service discovery of every
registered instance at /prometheus/sd (docs/PROMETHEUS.md).

The console is read-only unless --console-admin-token-file names a file
holding an admin token, or --console-admin-basic-auth-file an htpasswd file
of bcrypt hashes (lines user:hash, made by htpasswd -nB -C 12 USER): whoever logs in
with the token, or as one of those users with their password, can drain,
undrain and weigh instances, one or every instance matching a filter, as
muster drain, undrain and weight do. Each action is logged on stderr with the
session (and user) that asked. The htpasswd file is read again when it
changes: a user removed from it loses its sessions within a second of its
next request, and a user added may log in, without a restart.
It listens on loopback by default; put it behind TLS before exposing it.

With --legacy (repeatable: [SERVICE=]LAYOUT[:NAME], as for ls and watch),
the console merges legacy sources with Muster's registry, as clients' merged
Discovery does: the services page also lists the services a --legacy value
names and a Sources column, the service page a Source column and filter;
actions apply to Muster's instances only. A --legacy value without SERVICE=
applies to every service, by its Muster name.

The listener also serves /metrics and the health of the process: /livez;
/readyz, 503 until the registry's services were listed and each read once,
then 200 for the life of the process, an etcd outage marked stale in its
JSON body rather than failing every replica at once (docs/HEALTH.md).`,
		Example: `  muster console --endpoints http://10.0.0.1:2379
  muster console --legacy user=go-zero:user.rpc --legacy kratos
  muster console --listen 127.0.0.1:9090 --console-admin-token-file /etc/muster/console-token
  muster console --console-admin-basic-auth-file /etc/muster/console-users`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(o.listen); err != nil {
				return usageErrorf("--listen %q: want host:port: %v", o.listen, err)
			}
			if err := o.clients.validate(); err != nil {
				return err
			}
			return runConsole(cmd.Context(), g, o, cmd.ErrOrStderr(), nil)
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", defaultConsoleListen, "host:port to serve the console, /prometheus/sd, /metrics, /livez and /readyz on")
	o.addFlags(cmd)
	o.legacy.addLegacy(cmd, "")
	o.clusters.add(cmd)
	return cmd
}

// runConsole serves the console as o says until ctx ends. Once it listens
// it calls ready, if not nil, with the console's URL.
func runConsole(ctx context.Context, g *globalOptions, o consoleOptions, stderr io.Writer, ready func(url string)) error {
	log := g.log.logger(stderr, slog.LevelInfo)
	var cfg clientv3.Config
	if len(o.clusters.values) == 0 {
		var err error
		if cfg, err = g.clientConfig(); err != nil {
			return err
		}
		cfg.Logger = etcd.ClientLogger(log)
	}
	served, err := o.consoleAndSD(g, nil, cfg, log)
	if err != nil {
		return err
	}
	defer served.stop()
	l, err := serveMetrics(httpServing{
		addr: o.listen, hosts: hostFlag{"--console-host", o.hosts}, what: "muster: this console",
		health:  health.New(nil, served.listing.State),
		routes:  []route{served.ui, served.sd, {"GET /{$}", http.RedirectHandler(consolePath, http.StatusFound)}},
		clients: o.clients,
	}, log)
	if err != nil {
		return fmt.Errorf("console: --listen %s: %w", o.listen, err)
	}
	url := "http://" + l.addr + consolePath
	if len(o.clusters.values) > 0 {
		log.Info("console on " + url + " for --cluster " + strings.Join(o.clusters.values, " --cluster "))
	} else {
		log.Info("console on " + url + " for --endpoints " + strings.Join(g.endpoints, ","))
	}
	if ready != nil {
		ready(url)
	}
	select {
	case <-ctx.Done():
	case err := <-l.done:
		return fmt.Errorf("console: %w", err)
	}
	log.Info("stopping")
	// The event streams end with the console, then the server closes.
	served.stop()
	l.stop()
	return nil
}
