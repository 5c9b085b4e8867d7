package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/musterhq/muster/console"
	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/clusters"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// dataDirHelp says where serve keeps its data by default.
const dataDirHelp = "$XDG_STATE_HOME/muster/etcd, or ~/.local/state/muster/etcd when XDG_STATE_HOME is not set " +
	"(on macOS ~/Library/Application Support/muster/etcd, on Windows %LocalAppData%\\muster\\etcd)"

// defaultDataDir returns serve's default data directory: a per-user state
// directory (see dataDirHelp), so that the registry does not depend on,
// nor litter, the working directory.
func defaultDataDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "muster", "etcd"), nil
	}
	var base string
	var err error
	switch runtime.GOOS {
	case "windows":
		base, err = os.UserCacheDir() // %LocalAppData%
	case "darwin", "ios":
		base, err = os.UserConfigDir() // ~/Library/Application Support
	default:
		base, err = os.UserHomeDir()
		base = filepath.Join(base, ".local", "state")
	}
	if err != nil {
		return "", fmt.Errorf("no default data directory (%w); give one with --data-dir", err)
	}
	return filepath.Join(base, "muster", "etcd"), nil
}

// serveOptions are the flags of muster serve.
type serveOptions struct {
	log       logOptions
	dataDir   string
	clientURL string
	peerURL   string
	name      string
	// metricsAddr is where /metrics and /healthz are served; empty: not
	// served.
	metricsAddr string
	// xdsAddr is where the xDS control plane serves ADS; empty: not
	// served.
	xdsAddr string
	// xdsTLS secures xdsAddr.
	xdsTLS xdsTLS
	// xdsSelfCheck is xds.WithSelfCheck (--xds-self-check).
	xdsSelfCheck bool
	// console configures the web console served on metricsAddr.
	console consoleFlags
	// security is TLS and authentication for the embedded etcd.
	security serveSecurity
	// insecureAnywhere lets the embedded etcd listen on addresses other
	// than loopback with neither TLS nor authentication.
	insecureAnywhere bool
	// quotaBackendBytes is embedetcd.Config.QuotaBackendBytes
	// (--quota-backend-bytes).
	quotaBackendBytes int64
}

// validate checks the flags and fills in the default data directory when
// --data-dir was not given (dataDirSet false).
func (o *serveOptions) validate(dataDirSet bool) error {
	switch {
	case dataDirSet && o.dataDir == "":
		return usageErrorf("--data-dir: must not be empty")
	case !dataDirSet:
		dir, err := defaultDataDir()
		if err != nil {
			return usageErrorf("%v", err)
		}
		o.dataDir = dir
	}
	if o.name == "" {
		return usageErrorf("--name: must not be empty")
	}
	if o.quotaBackendBytes < 0 {
		return usageErrorf("--quota-backend-bytes %d: want 0 (etcd's default, 2 GiB) or more", o.quotaBackendBytes)
	}
	var err error
	if o.clientURL, err = parseEndpoint("--listen-client-url", o.clientURL); err != nil {
		return err
	}
	if o.peerURL, err = parseEndpoint("--listen-peer-url", o.peerURL); err != nil {
		return err
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
	if err := o.security.validate(o.clientURL, o.peerURL, o.insecureAnywhere); err != nil {
		return err
	}
	if o.xdsAddr != "" {
		if _, _, err := net.SplitHostPort(o.xdsAddr); err != nil {
			return usageErrorf("--xds-listen %q: want host:port: %v", o.xdsAddr, err)
		}
	} else if o.xdsTLS.enabled() || o.xdsTLS.cacert != "" {
		return usageErrorf("--xds-cert, --xds-key and --xds-cacert need --xds-listen")
	}
	if err := o.console.clients.validate(); err != nil {
		return err
	}
	if o.console.enabled() && o.metricsAddr == "" {
		return usageErrorf("--console-admin-token-file, --console-admin-basic-auth-file, --console-legacy and --console-cluster need --metrics-listen, where the console is served")
	}
	if err := o.validateConsoleClusters(); err != nil {
		return err
	}
	if _, err := o.console.legacy.sources(""); err != nil {
		return err
	}
	return o.xdsTLS.validate()
}

// consoleGlobals are the etcd options of the clusters serve's console
// reads beside its own (--console-cluster): each value's own TLS and login
// keys, no flags of their own.
func consoleGlobals() *globalOptions {
	return &globalOptions{prefix: registry.DefaultPrefix, timeout: defaultTimeout}
}

// validateConsoleClusters checks --console-cluster and
// --console-cluster-name: valid, distinct names, each cluster's settings
// valid.
func (o *serveOptions) validateConsoleClusters() error {
	specs, err := o.console.clusters.parse()
	if err != nil || len(specs) == 0 {
		return err
	}
	if err := clusters.ValidateName(o.console.ownName); err != nil {
		return usageErrorf("--console-cluster-name: %v", err)
	}
	for _, spec := range specs {
		if spec.name == o.console.ownName {
			return usageErrorf("--console-cluster %s: the name is this server's own registry's (--console-cluster-name)", spec.name)
		}
		if _, err := consoleGlobals().forCluster(spec); err != nil {
			return err
		}
	}
	return nil
}

func newServeCmd(log *logOptions) *cobra.Command {
	o := serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an embedded single-node etcd as the registry",
		Long: `Serve runs a single-node etcd server inside this process, for servers to
register in and clients to discover from. It keeps its data in --data-dir,
by default in your state directory:
` + dataDirHelp + `.
A restart keeps the registrations that have not expired.

It logs one "ready" line on stderr, with the data directory, once clients
can connect, and stops
cleanly on SIGINT or SIGTERM. For production, run a real etcd cluster and
point --endpoints at it instead.

By default the embedded etcd has no TLS and no authentication: anyone who
reaches its client or peer port can write and delete registrations and
lock the registry. So both URLs must be loopback addresses (the default)
unless the listener is secured: a client URL elsewhere needs TLS (an
https:// URL with --cert-file and --key-file, as etcd's flags) and
authentication (--root-password-file turns etcd auth on with the user
root, or --client-cert-auth with --trusted-ca-file requires client
certificates); a peer URL elsewhere needs --peer-cert-file, --peer-key-file,
--peer-trusted-ca-file and --peer-client-cert-auth. Or
--insecure-listen-anywhere says the network is trusted. This process's own
console and xDS control plane reach its etcd over the same TLS, as root.
See docs/SECURITY.md.

With --xds-listen it also serves every registered service to xDS clients
(gRPC in any language, xds:///<service>), as "muster xds" does, over TLS
with --xds-cert and --xds-key (and client certificates signed by
--xds-cacert required, if given); those files are read again when they
change, so certificates rotate without a restart.

etcd refuses a request larger than 512 KiB, twice the largest value Muster
writes. When its database reaches --quota-backend-bytes, etcd raises the
alarm NOSPACE and refuses every write and lease grant until an operator
frees space and disarms it (docs/SECURITY.md, "Registry quota"): serve
logs the alarm when it is raised and when it is cleared, exports it as
muster_etcd_alarm and fails /healthz meanwhile; /readyz stays 200 (reads go
on), its JSON body stale since the alarm, with the alarm as the cause.

On its metrics address (--metrics-listen) it serves /metrics, its health
(/livez: 200 while the embedded etcd runs; /readyz: 503 until every service
was read once, then 200 for the life of the process, an outage marked stale
in the body rather than failing every replica at once; docs/HEALTH.md),
/healthz (the old check),
Prometheus's HTTP service discovery of every registered instance at
/prometheus/sd (docs/PROMETHEUS.md) and the web console at /ui/: the services and their instances, live (and, with
--xds-listen, the connected xDS clients with their acknowledged versions);
read-only unless --console-admin-token-file names a file holding the token that lets
an operator drain, undrain and weigh instances, or --console-admin-basic-auth-file
an htpasswd file of bcrypt hashes (htpasswd -nB -C 12 USER) of the operators who may.
--console-legacy merges legacy sources into the console's views as muster
console --legacy does. --console-cluster NAME=ENDPOINTS[,KEY=VALUE...]
(repeatable) makes the console, and the Prometheus service discovery, read
other etcd clusters beside this server's registry, which they name
--console-cluster-name: the union, each instance with its cluster, each
cluster's health (docs/CLUSTERS.md); a cluster's TLS and login are given in
its value (cacert=, cert=, key=, user=, password-file=).`,
		Example: `  muster serve
  muster serve --data-dir /var/lib/muster --listen-client-url http://127.0.0.1:2379
  muster serve --xds-listen 127.0.0.1:18000
  muster serve --listen-client-url https://0.0.0.0:2379 --cert-file server.pem --key-file server-key.pem \
      --root-password-file /etc/muster/root-password`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(cmd.Flags().Changed("data-dir")); err != nil {
				return err
			}
			o.log = *log
			return runServe(cmd.Context(), o, cmd.ErrOrStderr(), nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "", "directory for etcd's data, created if missing (default: the muster/etcd directory in your state directory)")
	f.StringVar(&o.clientURL, "listen-client-url", embedetcd.DefaultClientURL, "URL to listen on for clients: http://host:port or host:port, or https://host:port with --cert-file; the host an IP address or localhost")
	f.StringVar(&o.peerURL, "listen-peer-url", embedetcd.DefaultPeerURL, "URL to listen on for etcd peers, in the form of --listen-client-url")
	f.StringVar(&o.name, "name", embedetcd.DefaultName, "etcd member name; keep it the same for a data directory")
	f.Int64Var(&o.quotaBackendBytes, "quota-backend-bytes", 0, "most bytes the embedded etcd's database may hold; past it etcd raises the alarm NOSPACE and refuses writes and new leases until an operator frees space (docs/SECURITY.md); 0: etcd's default, 2 GiB")
	f.BoolVar(&o.insecureAnywhere, "insecure-listen-anywhere", false, "let --listen-client-url and --listen-peer-url be other than loopback without TLS and authentication: anyone who reaches them then controls the registry")
	o.security.addFlags(f)
	f.StringVar(&o.metricsAddr, "metrics-listen", "127.0.0.1:2381", "host:port to serve Prometheus /metrics, /livez, /readyz (docs/HEALTH.md), the console and /prometheus/sd on; empty to not serve them")
	f.StringVar(&o.xdsAddr, "xds-listen", "", "host:port to serve the registry to xDS clients on (ADS, plaintext unless --xds-cert); empty to not serve it")
	f.BoolVar(&o.xdsSelfCheck, "xds-self-check", false, "with --xds-listen: check every resource before publishing it against the preconditions of gRPC's xDS clients, logging each breach (see muster xds --self-check)")
	o.xdsTLS.addFlags(cmd)
	o.console.addFlags(cmd)
	o.console.legacy.addLegacy(cmd, "console-")
	o.console.clusters.addNamed(cmd, "console-cluster")
	f.StringVar(&o.console.ownName, "console-cluster-name", "local",
		"the name of this server's own registry among the --console-cluster clusters")
	return cmd
}

// runServe runs an embedded etcd as o says until ctx ends, then stops it
// and returns nil. It logs to stderr. Once the server accepts clients it
// calls ready, if not nil, with the endpoint clients use. It returns an
// error if the server cannot start (address in use, unusable data
// directory) or stops on its own.
func runServe(ctx context.Context, o serveOptions, stderr io.Writer, ready func(endpoint string)) error {
	log := o.log.logger(stderr, slog.LevelInfo)
	// etcd logs why it cannot start, as serve's error says again with
	// a hint: its errors are shown only once it runs.
	etcdLog, etcdLogLevel := quietUntilRunning(stderr)
	srv, err := embedetcd.Start(ctx, embedetcd.Config{
		Dir:          o.dataDir,
		Name:         o.name,
		ClientURL:    o.clientURL,
		PeerURL:      o.peerURL,
		ClientTLS:    o.security.clientTLS(),
		PeerTLS:      o.security.peerTLS(),
		RootPassword: o.security.rootPassword,
		Logger:       etcdLog,

		QuotaBackendBytes: o.quotaBackendBytes,
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
	case errors.Is(err, embedetcd.ErrAuth):
		return fmt.Errorf("serve: --data-dir %s: %w\n(give root's password with --root-password-file)", o.dataDir, err)
	default:
		return fmt.Errorf("serve: %w", err)
	}

	etcdLogLevel.SetLevel(zapcore.ErrorLevel)
	// What runs is stopped in the reverse order of starting, on every
	// path out: the control plane and the console before etcd, so that
	// their Discoveries end while etcd still answers.
	var stack cleanups
	defer func() { _ = stack.run() }()
	stack.push(srv.Close)
	quota := o.quotaBackendBytes
	if quota == 0 {
		quota = embedetcd.DefaultQuotaBackendBytes
	}
	alarms := watchAlarms(srv.Alarms, quota, log)
	stack.push(alarms.Close)

	// runMetrics holds the collectors of this run, the alarms' and the
	// control plane's if it runs: a registry per run (not the global
	// one), so that serve can run twice in one process.
	runMetrics := prometheus.NewRegistry()
	runMetrics.MustRegister(alarms)
	var consoleOpts []console.Option // the xDS clients page, if the control plane runs
	if o.xdsAddr != "" {
		cp, stop, err := serveXDS(o.security.selfClient(srv), xdsOptions{listen: o.xdsAddr, policy: string(xds.RoundRobin), tls: o.xdsTLS, selfCheck: o.xdsSelfCheck, clients: o.console.clients}, runMetrics, log)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		consoleOpts = append(consoleOpts, console.WithXDS(cp))
		stack.push(func() error {
			if err := stop(); err != nil {
				log.Error("stopping the xds control plane", "error", err)
			}
			return nil
		})
	}
	if o.metricsAddr != "" {
		self := o.security.selfClient(srv)
		served, err := o.console.consoleAndSD(consoleGlobals(), &consoleCluster{name: o.console.ownName, cfg: self}, self, log, consoleOpts...)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		stack.push(func() error { served.stop(); return nil })
		stopped := func() error {
			select {
			case <-srv.Done():
				return errors.New("etcd stopped")
			default:
				return nil
			}
		}
		l, err := serveMetrics(httpServing{
			addr: o.metricsAddr, hosts: hostFlag{"--console-host", o.console.hosts}, extra: runMetrics, clients: o.console.clients,
			healthz: func() error { return cmp.Or(stopped(), alarms.Err()) },
			health:  health.New(stopped, func() health.State { return serveState(served.listing, alarms) }),
			routes:  []route{served.ui, served.sd},
		}, log)
		if err != nil {
			return fmt.Errorf("serve: --metrics-listen %s: %w", o.metricsAddr, err)
		}
		stack.push(func() error { l.stop(); return nil })
		log.Info("metrics on http://" + l.addr + "/metrics, health on http://" + l.addr + "/livez and /readyz, console on http://" + l.addr + consolePath +
			", Prometheus service discovery on http://" + l.addr + prometheusSDPath)
	}
	log.Info("ready, clients use --endpoints "+srv.Endpoint()+"; data in "+o.dataDir, "name", o.name,
		"tls", o.security.clientTLS() != nil, "auth", o.security.rootPassword != "")
	if ready != nil {
		ready(srv.Endpoint())
	}

	select {
	case <-ctx.Done():
		log.Info("stopping")
		if err := stack.run(); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		log.Info("stopped")
		return nil
	case <-srv.Done():
		_ = stack.run()
		return fmt.Errorf("serve: etcd stopped: %w", srv.Err())
	}
}

// serveState is what serve's /readyz reports: ready once the embedded
// etcd serves (before the listener starts) and every service was read
// once (listing, the Discovery of its Prometheus service discovery); an
// alarm of the embedded etcd is its outage: reads go on, writes and lease
// grants are refused, so it keeps serve ready and is reported as the
// process's staleness, with since when.
func serveState(listing *health.Listing, alarms *etcdAlarms) health.State {
	st := listing.State()
	if since, err := alarms.Raised(); err != nil {
		st.StaleSince, st.Err = since, health.AlarmError(err)
	}
	return st
}

// quietUntilRunning returns a logger for etcd that writes errors, in
// etcd's console format, to w once its level is set to
// zapcore.ErrorLevel, and nothing before.
func quietUntilRunning(w io.Writer) (*zap.Logger, zap.AtomicLevel) {
	level := zap.NewAtomicLevelAt(zapcore.FatalLevel)
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(w), level)
	return zap.New(core), level
}

// serveXDS starts an xDS control plane as o says over every service of the
// embedded etcd that cfg reaches, registers its collectors (and its
// Discovery's) in reg, and returns it and the function that stops it.
func serveXDS(cfg clientv3.Config, o xdsOptions, reg prometheus.Registerer, log *slog.Logger) (cp *xds.Server, stop func() error, err error) {
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("xds: etcd client: %w", err)
	}
	d, err := etcd.NewDiscovery(cli, etcd.WithLogger(log))
	if err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("xds: %w", err)
	}
	canaries, err := etcd.NewCanaries(cli, etcd.WithLogger(log))
	if err != nil {
		_ = d.Close()
		cli.Close()
		return nil, nil, fmt.Errorf("xds: %w", err)
	}
	policies, err := etcd.NewPolicies(cli, etcd.WithLogger(log))
	if err != nil {
		_ = d.Close()
		cli.Close()
		return nil, nil, fmt.Errorf("xds: %w", err)
	}
	cp, stopCP, _, err := startXDS(d, canaries, policies, o, log)
	if err != nil {
		_ = d.Close()
		cli.Close()
		return nil, nil, fmt.Errorf("--xds-listen: %w", err)
	}
	if err := reg.Register(metrics.XDS(cp, nil)); err != nil {
		log.Error("cannot register the xds metrics", "error", err)
	}
	if err := reg.Register(metrics.Discovery(d, nil)); err != nil {
		log.Error("cannot register the xds discovery's metrics", "error", err)
	}
	return cp, func() error {
		err := stopCP()
		_ = d.Close()
		cli.Close()
		return err
	}, nil
}
