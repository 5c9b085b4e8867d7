package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/zookeeper"
	"github.com/musterhq/muster/xds"
)

// defaultXDSListen is where muster xds serves ADS by default.
const defaultXDSListen = "127.0.0.1:18000"

// xdsOptions are the flags of muster xds.
type xdsOptions struct {
	// clusters are the --cluster values: several etcd clusters served as
	// one (only in muster xds).
	clusters clusterFlags
	listen   string
	services []string
	policy   string
	// metricsAddr is where /metrics and /healthz are served; empty: not
	// served. metricsHosts are the host names that listener answers to
	// beside loopback and its own address.
	metricsAddr  string
	metricsHosts []string
	// clients is --client-ipv4-prefix (xds.WithClientIPv4Prefix and the
	// metrics listener's); 0: each address a client.
	clients clientGrouping
	tls     xdsTLS
	// forgetAfter is xds.WithForgetAfter's duration; 0: its default.
	forgetAfter time.Duration
	// endpointMetadata is xds.WithEndpointMetadata.
	endpointMetadata bool
	// maxConns and maxStreams are xds.WithMaxConnections and
	// xds.WithMaxStreams; 0: their defaults.
	maxConns, maxStreams int
	// clientConns and clientStreams are xds.WithClientShare's; 0: its
	// defaults.
	clientConns, clientStreams int
	// slowStart is xds.WithSlowStart's window (0: off), with its
	// aggression and minimum weight percent.
	slowStart                        time.Duration
	slowAggression, slowMinWeightPct float64
	// selfCheck is xds.WithSelfCheck.
	selfCheck bool
}

func newXDSCmd(g *globalOptions) *cobra.Command {
	o := xdsOptions{}
	cmd := &cobra.Command{
		Use:   "xds",
		Short: "Serve the registry to xDS clients (gRPC in any language) over ADS",
		Long: `Xds runs an xDS control plane beside the etcd given by --endpoints: gRPC
clients in Go, Java, C++, Python or Node call xds:///<service> and get the
service's instances with no Muster code, zone preference and weights included
(see docs/XDS.md). It is stateless: run several for scale or availability,
and give clients a bootstrap naming them all (muster xds-bootstrap --help).

It publishes the services of --services, or every service in the registry
(looked for again every 10s; a service with no instance and no key left is
forgotten after --forget-after, and published again when it comes back). While etcd is unreachable it keeps serving what
it knows. Give clients a bootstrap file made by "muster xds-bootstrap".

ADS is plaintext unless --xds-cert and --xds-key are given; with
--xds-cacert as well, clients must present a certificate signed by that CA.
The three files are read again when they change, so certificates rotate
without a restart: new connections get the new ones, established streams
keep theirs, and a change that does not load (a missing or broken file, a
key that does not match) is logged and the last good files stay in use.
(--cacert, --cert and --key are the etcd connection's.)

With --cluster NAME=ENDPOINTS (repeatable), the control plane serves the
union of several independent etcd clusters, as clients' several-cluster
Discovery reads them: each cluster stale or fresh on its own, empty-list
protection per cluster, each instance's cluster in the endpoint metadata's
"muster.cluster" (with --endpoint-metadata) and its cluster's locality as
registered. Canaries and call policies are per cluster and not followed;
--metrics-listen serves the control plane's metrics only.

With --metrics-listen it serves /metrics and its health there: /livez is
200 while the control plane serves ADS; /readyz is 503 until its services
are known (--services, or a first listing answered) and each was read once,
then 200 for the life of the process: during an etcd outage it keeps serving
the last known lists, and /readyz stays 200 with each service marked stale
(since when, why) in its JSON body, so that an outage does not take every
replica out of a load balancer at once (docs/HEALTH.md).`,
		Example: `  muster xds --endpoints http://127.0.0.1:2379 --listen 127.0.0.1:18000
  muster xds --services user,greeter --policy ring_hash
  muster xds --policy muster_wrr --slow-start 30s
  muster xds --xds-cert cp.pem --xds-key cp-key.pem --xds-cacert clients-ca.pem
  muster xds --cluster eu=http://10.0.0.1:2379 --cluster us=http://10.1.0.1:2379`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateXDSFlags(o); err != nil {
				return err
			}
			return runXDS(cmd.Context(), g, o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", defaultXDSListen, "host:port to serve ADS on (plaintext unless --xds-cert)")
	f.StringSliceVar(&o.services, "services", nil, "services to publish, comma-separated; default: every service in the registry")
	f.StringVar(&o.metricsAddr, "metrics-listen", "", "host:port to serve Prometheus /metrics, /livez and /readyz on (docs/HEALTH.md); empty to not serve them")
	f.StringSliceVar(&o.metricsHosts, "metrics-host", nil, "host names (or IP addresses) the --metrics-listen listener answers to, beside loopback ones and its own address, comma-separated or repeated: the names Prometheus reaches it by (others get 421, against DNS rebinding)")
	f.DurationVar(&o.forgetAfter, "forget-after", 5*time.Minute, "how long a service with no instance left, and no key left in the registry, stays published before it is forgotten (without --services only)")
	f.StringVar(&o.policy, "policy", string(xds.RoundRobin), "load-balancing policy of every cluster: round_robin, ring_hash (honours weights; one x-muster-key, one backend), least_request (clients without it use round_robin), or muster_p2c / muster_wrr (Go clients that import Muster's balancers; others use round_robin)")
	f.IntVar(&o.maxConns, "max-connections", 1024, "most client connections served at once; more are closed as they come")
	f.IntVar(&o.maxStreams, "max-streams", 4096, "most ADS streams served at once; more end at once with RESOURCE_EXHAUSTED")
	f.IntVar(&o.clientConns, "client-connections", 64, "most connections one client (an IPv4 address, an IPv6 /64) holds at once; more are closed as they come")
	f.IntVar(&o.clientStreams, "client-streams", 256, "most ADS streams one client (an IPv4 address, an IPv6 /64) holds at once; more end with RESOURCE_EXHAUSTED")
	f.BoolVar(&o.endpointMetadata, "endpoint-metadata", false, "publish each endpoint's instance (id, version, zone, weight, metadata) as filter metadata \"muster\", for proxies and tools that read it; no gRPC client does, and it costs clients decoding time on every change")
	f.BoolVar(&o.selfCheck, "self-check", false, "check every resource before publishing it against the preconditions of gRPC's xDS clients (Go, Java, C-core, Node; docs/XDS.md), logging each breach at error level: a debugging aid (a breach is a bug in Muster), at some CPU per change")
	f.DurationVar(&o.slowStart, "slow-start", 0, "with --policy muster_p2c or muster_wrr: ramp an instance registered less than this ago (at most 1h) from --slow-start-min-weight-percent to its full share, by its registration time (Go clients on Muster's balancers; others give it its full share at once); 0 for off")
	f.Float64Var(&o.slowAggression, "slow-start-aggression", 1, "shape of the --slow-start ramp, 0.1..10: 1 is linear, more gives a young instance more sooner")
	f.Float64Var(&o.slowMinWeightPct, "slow-start-min-weight-percent", 10, "the share of its weight a ramping instance gets at least, 0..100")
	o.clients.addFlag(cmd)
	o.tls.addFlags(cmd)
	o.clusters.add(cmd)
	return cmd
}

func validateXDSFlags(o xdsOptions) error {
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return usageErrorf("--listen %q: want host:port: %v", o.listen, err)
	}
	for _, s := range o.services {
		if err := registry.ValidateName(s); err != nil {
			return usageErrorf("--services: %v", err)
		}
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return usageErrorf("--metrics-listen %q: want host:port: %v", o.metricsAddr, err)
		}
	}
	if o.forgetAfter <= 0 {
		return usageErrorf("--forget-after %v: want a positive duration", o.forgetAfter)
	}
	if o.maxConns < 1 {
		return usageErrorf("--max-connections %d: want at least 1", o.maxConns)
	}
	if o.maxStreams < 1 {
		return usageErrorf("--max-streams %d: want at least 1", o.maxStreams)
	}
	if o.clientConns < 1 {
		return usageErrorf("--client-connections %d: want at least 1", o.clientConns)
	}
	if o.clientStreams < 1 {
		return usageErrorf("--client-streams %d: want at least 1", o.clientStreams)
	}
	if err := o.clients.validate(); err != nil {
		return err
	}
	switch xds.LBPolicy(o.policy) {
	case xds.RoundRobin, xds.RingHash, xds.LeastRequest, xds.MusterP2C, xds.MusterWRR:
	default:
		return usageErrorf("--policy %q: want round_robin, ring_hash, least_request, muster_p2c or muster_wrr", o.policy)
	}
	if err := validateSlowStartFlags(o); err != nil {
		return err
	}
	return o.tls.validate()
}

// validateSlowStartFlags checks --slow-start and its shape flags.
func validateSlowStartFlags(o xdsOptions) error {
	switch {
	case o.slowStart == 0:
		return nil
	case o.slowStart < 0 || o.slowStart > time.Hour:
		return usageErrorf("--slow-start %v: want a duration up to 1h, or 0 for off", o.slowStart)
	case o.policy != string(xds.MusterP2C) && o.policy != string(xds.MusterWRR):
		return usageErrorf("--slow-start: --policy %s has no slow start; want muster_p2c or muster_wrr", o.policy)
	case math.IsNaN(o.slowAggression) || o.slowAggression < 0.1 || o.slowAggression > 10:
		return usageErrorf("--slow-start-aggression %v: want 0.1..10", o.slowAggression)
	case math.IsNaN(o.slowMinWeightPct) || o.slowMinWeightPct < 0 || o.slowMinWeightPct > 100:
		return usageErrorf("--slow-start-min-weight-percent %v: want 0..100", o.slowMinWeightPct)
	}
	return nil
}

// runXDS serves ADS as o says until ctx ends, then returns nil.
func runXDS(ctx context.Context, g *globalOptions, o xdsOptions, stderr io.Writer) error {
	specs, err := o.clusters.parse()
	if err != nil {
		return err
	}
	if len(specs) > 0 {
		return runXDSClusters(ctx, g, o, specs, stderr)
	}
	log := g.log.logger(stderr, slog.LevelInfo)
	// The Store logs at the level of a process that runs until stopped,
	// as its settings followers did: a follower reading again says so.
	s, err := g.open(ctx, stderr, storeOptions{clientLog: log,
		etcd: []etcd.StoreOption{etcd.WithLogger(log)}, zk: []zookeeper.Option{zookeeper.WithLogger(log)}})
	if err != nil {
		return err
	}
	defer s.Close()
	// Each service's canary setting (muster canary) splits its uncolored
	// calls over xDS as it does for Muster's own balancers, and its call
	// policy (muster policy) is published with its routes and clusters:
	// the Store follows both.
	canaries, _ := s.store.(registry.CanarySource)
	policies, _ := s.store.(registry.PolicySource)
	d, state := xdsFollowing(s.view, o)
	cp, stop, live, err := startXDS(d, canaries, policies, o, log)
	if err != nil {
		return err
	}
	var collectors []prometheus.Collector
	if sr, ok := s.view.(registry.StatsReporter); ok {
		collectors = append(collectors, metrics.Discovery(sr, nil))
	}
	return serveXDSUntil(ctx, o, cp, stop, health.New(live, state), log, collectors...)
}

// xdsFollowing returns the Discovery the control plane of o follows
// services by (d, through a health.Listing when it serves every service)
// and the state its /readyz reports: ready once every service of
// --services, or every service of the first listing, was read once.
func xdsFollowing(d lister, o xdsOptions) (lister, func() health.State) {
	l := health.NewListing(d)
	if len(o.services) > 0 { // nothing to list: l only reads d's stats
		return d, func() health.State { return health.Following(l.DiscoveryStats(), o.services) }
	}
	return l, l.State
}

// serveXDSUntil serves cp's metrics (and extra) and its health (hc) on
// --metrics-listen, if given, until ctx ends, then stops the control
// plane with stop.
func serveXDSUntil(ctx context.Context, o xdsOptions, cp *xds.Server, stop func() error, hc *health.Checker, log *slog.Logger, extra ...prometheus.Collector) error {
	if o.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(append([]prometheus.Collector{metrics.XDS(cp, nil)}, extra...)...)
		l, err := serveMetrics(httpServing{addr: o.metricsAddr, hosts: hostFlag{"--metrics-host", o.metricsHosts}, extra: reg, health: hc, clients: o.clients}, log)
		if err != nil {
			_ = stop()
			return fmt.Errorf("xds: --metrics-listen %s: %w", o.metricsAddr, err)
		}
		defer l.stop()
		log.Info("metrics on http://" + l.addr + "/metrics, health on http://" + l.addr + "/livez and /readyz")
	}
	<-ctx.Done()
	log.Info("stopping")
	return stop()
}

// startXDS starts a control plane over d serving ADS on o.listen, logs
// where, and returns it, the function that stops it and its liveness (an
// error once it stopped serving ADS). canaries and policies may be nil:
// not followed.
func startXDS(d registry.Discovery, canaries registry.CanarySource, policies registry.PolicySource, o xdsOptions,
	log *slog.Logger) (cp *xds.Server, stop func() error, live func() error, err error) {
	opts := []xds.Option{xds.WithLogger(log), xds.WithLBPolicy(xds.LBPolicy(o.policy))}
	if canaries != nil { // nil over several clusters: the settings are per cluster
		opts = append(opts, xds.WithCanaries(canaries))
	}
	if policies != nil {
		opts = append(opts, xds.WithPolicies(policies))
	}
	if len(o.services) > 0 {
		opts = append(opts, xds.WithServices(o.services...))
	}
	if o.forgetAfter > 0 {
		opts = append(opts, xds.WithForgetAfter(o.forgetAfter))
	}
	if o.endpointMetadata {
		opts = append(opts, xds.WithEndpointMetadata())
	}
	if o.maxConns > 0 {
		opts = append(opts, xds.WithMaxConnections(o.maxConns))
	}
	if o.maxStreams > 0 {
		opts = append(opts, xds.WithMaxStreams(o.maxStreams))
	}
	if o.clientConns > 0 && o.clientStreams > 0 {
		opts = append(opts, xds.WithClientShare(o.clientConns, o.clientStreams))
	}
	if o.clients > 0 {
		opts = append(opts, xds.WithClientIPv4Prefix(int(o.clients)))
	}
	if o.slowStart != 0 {
		opts = append(opts, xds.WithSlowStart(o.slowStart, o.slowAggression, o.slowMinWeightPct))
	}
	if o.selfCheck {
		opts = append(opts, xds.WithSelfCheck())
	}
	if tlsOpt := o.tls.option(); tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	srv, err := xds.New(d, opts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("xds: %w", err)
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		_ = srv.Close()
		return nil, nil, nil, fmt.Errorf("xds: --listen %s: %w", o.listen, err)
	}
	done, ended := make(chan error, 1), make(chan struct{})
	go func() {
		err := srv.Serve(context.Background(), lis)
		close(ended)
		done <- err
	}()
	log.Info("xds control plane serving ADS on "+lis.Addr().String(), "security", o.tls.mode(), "self_check", o.selfCheck)
	return srv, func() error {
			_ = srv.Close()
			if err := <-done; err != nil && err != xds.ErrClosed {
				return err
			}
			return nil
		}, func() error {
			select {
			case <-ended:
				return errors.New("xds: the control plane stopped serving ADS")
			default:
				return nil
			}
		}, nil
}

// runXDSClusters is runXDS over several clusters (--cluster).
func runXDSClusters(ctx context.Context, g *globalOptions, o xdsOptions, specs []clusterSpec, stderr io.Writer) error {
	s, err := g.connectClusters(stderr, specs)
	if err != nil {
		return err
	}
	defer s.Close()
	log := g.log.logger(stderr, slog.LevelInfo)
	d, state := xdsFollowing(s.view, o)
	cp, stop, live, err := startXDS(d, nil, nil, o, log)
	if err != nil {
		return err
	}
	return serveXDSUntil(ctx, o, cp, stop, health.New(live, state), log)
}
