package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/zookeeper"
)

// registerOptions are the flags of muster register.
type registerOptions struct {
	in       registry.Instance
	weight   numberText
	meta     []string
	check    string
	ttl      time.Duration
	interval time.Duration
	failures int
	warmup   time.Duration
	// metricsAddr is where /metrics, /livez and /readyz are served;
	// empty: not served. metricsHosts are the host names that listener
	// answers to beside loopback and its own address.
	metricsAddr  string
	metricsHosts []string
	// clients is --client-ipv4-prefix, for the metrics listener.
	clients clientGrouping
}

func newRegisterCmd(g *globalOptions) *cobra.Command {
	o := registerOptions{}
	cmd := &cobra.Command{
		Use:   "register",
		Short: "Keep a service that is not written in Go registered while it is healthy",
		Long: `Register is a sidecar: it registers one instance once its health check passes
(and has passed continuously for --warmup), drains it (registered, weight 0:
no new calls) after --failures checks in a row fail, undrains it when checks
pass again (continuously for --warmup, as before the first registration), and deregisters it on SIGINT or SIGTERM (revoking its lease; if
the sidecar is killed, the entry expires within --ttl). An operator's drain
(muster drain) is a separate override that the sidecar never undoes.

Checks (--check): grpc://host:port (the standard gRPC health service,
overall status), http://host:port/path (any 2xx), tcp://host:port (a
connection). Without --check the instance is registered at once and stays
registered until stopped.

It logs on stderr: "registered" once etcd holds the instance; while etcd does
not answer, a warning at once and then every 5s, with etcd's last error; on
exit, "deregistered on exit", or that nothing was registered.

With --metrics-listen it serves, there, Prometheus metrics (/metrics: the
checks by result, the state it keeps the instance in, the registrar's
state and its etcd failures by cause) and its health: /livez fails only
when the sidecar's loop stops turning; /readyz answers 503 until the
instance was registered once, then 200 for as long as the sidecar runs,
an etcd outage included (the JSON body then says since when the
registration is stale and why), so that an outage of the etcd every pod
shares does not take every pod out of its load balancer at once
(docs/HEALTH.md).`,
		Example: `  muster register --name user --addr 10.0.0.7:9000 --zone eu-1a --region eu-1 --check grpc://127.0.0.1:9000
  muster register --name user --addr 10.0.0.7:9000 --check grpc://127.0.0.1:9000 --warmup 30s
  muster register --name web --addr 10.0.0.8:8080 --meta team=core --check http://127.0.0.1:8080/healthz`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			check, err := o.parse()
			if err != nil {
				return err
			}
			if o.metricsAddr != "" {
				if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
					return usageErrorf("--metrics-listen %q: want host:port: %v", o.metricsAddr, err)
				}
			}
			if err := o.clients.validate(); err != nil {
				return err
			}
			return runRegister(cmd.Context(), g, o, check, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.metricsAddr, "metrics-listen", "", "host:port to serve Prometheus /metrics, /livez and /readyz on; empty to not serve them")
	f.StringSliceVar(&o.metricsHosts, "metrics-host", nil, "host names (or IP addresses) the --metrics-listen listener answers to, beside loopback ones and its own address, comma-separated or repeated: the names Prometheus and probes reach it by (others get 421, against DNS rebinding)")
	o.clients.addFlag(cmd)
	f.StringVar(&o.in.Name, "name", "", "service name (required)")
	f.StringVar(&o.in.Addr, "addr", "", "address clients dial, host:port (required)")
	f.StringVar(&o.in.ID, "id", "", "instance ID (default: the address)")
	f.StringVar(&o.in.Version, "version", "", "version of the instance")
	f.StringVar(&o.in.Zone, "zone", "", "zone the instance runs in")
	f.StringVar(&o.in.Region, "region", "", "region (group of zones) the instance runs in")
	o.weight = numberText(strconv.Itoa(registry.DefaultWeight))
	f.Var(&o.weight, "weight",
		fmt.Sprintf("relative share of new calls, 0..%d; 0 registers the instance drained (no new calls)", registry.MaxWeight))
	f.StringArrayVar(&o.meta, "meta", nil, "metadata key=value (repeatable)")
	f.StringVar(&o.check, "check", "", "health check: grpc://host:port, http://host:port/path or tcp://host:port")
	f.DurationVar(&o.ttl, "ttl", 10*time.Second, "lease TTL (on ZooKeeper: the session timeout): how long the entry outlives this process if it is killed")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "time between health checks")
	f.IntVar(&o.failures, "failures", 3, "failed checks in a row before draining")
	f.DurationVar(&o.warmup, "warmup", 0, "register, and undrain after failed checks, only once the health check has passed continuously for this long")
	return cmd
}

// numberText is a flag value kept as given, for a whole number that the
// command checks itself, so that every wrong value gets the command's own
// message.
type numberText string

func (n *numberText) String() string     { return string(*n) }
func (n *numberText) Set(s string) error { *n = numberText(s); return nil }
func (n *numberText) Type() string       { return "int" }

// parse validates the flags and returns the health check.
func (o *registerOptions) parse() (func(context.Context) error, error) {
	if o.in.Name == "" || o.in.Addr == "" {
		return nil, usageErrorf("--name and --addr are required")
	}
	for _, kv := range o.meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--meta %q: want key=value", kv)
		}
		if o.in.Metadata == nil {
			o.in.Metadata = map[string]string{}
		}
		o.in.Metadata[k] = v
	}
	w, err := parseWeight("--weight", string(o.weight))
	if err != nil {
		return nil, err
	}
	// The registry stores weight 0 as a drain; registry.Instance's own
	// zero weight means the default.
	o.in.Weight, o.in.Draining = w, w == 0
	if err := o.in.Validate(); err != nil {
		return nil, usageErrorf("%v", err)
	}
	switch {
	case o.ttl < time.Second:
		return nil, usageErrorf("--ttl %v: must be at least 1s", o.ttl)
	case o.interval <= 0:
		return nil, usageErrorf("--interval %v: must be positive", o.interval)
	case o.failures < 1:
		return nil, usageErrorf("--failures %d: must be at least 1", o.failures)
	case o.warmup < 0:
		return nil, usageErrorf("--warmup %v: must not be negative", o.warmup)
	}
	if o.check == "" {
		if o.warmup > 0 {
			return nil, usageErrorf("--warmup %v needs --check: it counts passing health checks", o.warmup)
		}
		return nil, nil
	}
	u, err := url.Parse(o.check)
	if err != nil || u.Host == "" {
		return nil, usageErrorf("--check %q: want grpc://host:port, http://host:port/path or tcp://host:port", o.check)
	}
	timeout := min(o.interval, 5*time.Second)
	switch u.Scheme {
	case "grpc":
		return grpcCheck(u.Host, timeout), nil
	case "http", "https":
		return httpCheck(o.check, timeout), nil
	case "tcp":
		return tcpCheck(u.Host, timeout), nil
	}
	return nil, usageErrorf("--check %q: unknown scheme %q; want grpc, http or tcp", o.check, u.Scheme)
}

func grpcCheck(addr string, timeout time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health status %v", resp.GetStatus())
		}
		return nil
	}
}

func httpCheck(target string, timeout time.Duration) func(context.Context) error {
	client := &http.Client{Timeout: timeout}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	}
}

func tcpCheck(addr string, timeout time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// registerWarnEvery is how often register warns while the instance is not
// registered because etcd does not answer.
const registerWarnEvery = 5 * time.Second

// sidecarState is what muster register wants of its instance.
type sidecarState int

const (
	unregistered sidecarState = iota // not yet: no check has passed for --warmup
	serving                          // registered as given
	drained                          // registered, weight 0: --failures checks failed
)

// sidecar is the state of muster register: what it wants (the instance
// registered, drained or not, after the health checks) and what it told
// the user.
type sidecar struct {
	g   *globalOptions
	o   registerOptions
	reg statusRegistrar
	// where names the registry, for messages (session's where).
	where string
	log   *slog.Logger
	// watch is what the sidecar shows of itself: metrics and health.
	watch *sidecarWatch
	// state is what the instance should be.
	state sidecarState
	// announced is true once "registered" was logged, until the
	// registration is lost or withdrawn.
	announced bool
	// inEtcd is true while the instance's key may be in etcd: it was
	// registered, and not yet deregistered for sure.
	inEtcd bool
	// lastWarn is when the last "not registered" warning was logged;
	// warnTick fires registerWarnEvery after it.
	lastWarn time.Time
	warnTick *time.Ticker
	// wait starts a goroutine that sends on registered once the instance
	// is registered; waiting is true while one runs.
	wait       func()
	waiting    bool
	registered chan struct{}
}

// statusRegistrar is a Registrar that reports its state: every backend's.
type statusRegistrar interface {
	registry.Registrar
	registry.StatusReporter
}

// runRegister keeps o.in registered while check passes, until ctx ends.
// It logs on stderr: "registered" only once the instance is in etcd, a
// warning every registerWarnEvery while etcd does not answer, and on exit
// "deregistered" only if there was something to deregister.
func runRegister(ctx context.Context, g *globalOptions, o registerOptions, check func(context.Context) error, stderr io.Writer) error {
	s, err := g.open(ctx, stderr, storeOptions{etcd: []etcd.StoreOption{etcd.WithTTL(o.ttl)},
		zk: []zookeeper.Option{zookeeper.WithSessionTimeout(o.ttl)}, clientLog: g.log.logger(stderr, slog.LevelInfo)})
	if err != nil {
		return err
	}
	defer s.Close()
	reg, ok := s.store.Registrar().(statusRegistrar)
	if !ok {
		return fmt.Errorf("register: the Registrar of %s reports no status", s.where())
	}
	attrs := []any{"service", o.in.Name}
	if id := o.in.Normalize().ID; id != o.in.Addr {
		attrs = append(attrs, "id", id)
	}
	attrs = append(attrs, "addr", o.in.Addr)
	log := g.log.logger(stderr, slog.LevelInfo)
	// The loop turns at least every --interval, after a check and a
	// registration that each end within their timeouts.
	watch := newSidecarWatch(o.in.Name, reg, 3*(o.interval+g.timeout)+10*time.Second)
	if o.metricsAddr != "" {
		m := prometheus.NewRegistry()
		m.MustRegister(metrics.Registrar(reg, nil), watch)
		l, err := serveMetrics(httpServing{addr: o.metricsAddr, hosts: hostFlag{"--metrics-host", o.metricsHosts}, extra: m, clients: o.clients,
			health: health.New(watch.live, watch.health)}, log)
		if err != nil {
			_ = reg.Close()
			return fmt.Errorf("register: --metrics-listen %s: %w", o.metricsAddr, err)
		}
		defer l.stop()
		log.Info("metrics on http://" + l.addr + "/metrics, health on http://" + l.addr + "/livez and /readyz")
	}
	sc := &sidecar{g: g, o: o, reg: reg, where: s.where(), watch: watch, registered: make(chan struct{}, 1), log: log.With(attrs...)}
	defer sc.close()

	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	sc.wait = func() {
		wg.Go(func() {
			if reg.WaitRegistered(wctx) == nil {
				select {
				case sc.registered <- struct{}{}:
				case <-wctx.Done():
				}
			}
		})
	}

	failed := 0
	var passing time.Time // since when checks have passed; zero after a failure
	checkTick := time.NewTicker(o.interval)
	defer checkTick.Stop()
	sc.warnTick = time.NewTicker(registerWarnEvery)
	defer sc.warnTick.Stop()
	for {
		sc.watch.turned()
		want := serving
		if check != nil {
			want = sc.state
			err := check(ctx)
			if ctx.Err() == nil {
				sc.watch.checked(err)
			}
			if err != nil {
				failed++
				passing = time.Time{}
				if sc.state == serving && failed >= o.failures {
					want = drained
				}
				if ctx.Err() == nil {
					next := fmt.Sprintf("draining at %d", o.failures)
					switch sc.state {
					case drained:
						next = "drained; undraining when a check passes"
					case unregistered:
						next = "registering when checks pass"
					}
					sc.log.Warn(fmt.Sprintf("health check failed (%d in a row; %s)", failed, next), "error", err)
				}
			} else {
				failed = 0
				if passing.IsZero() {
					passing = time.Now()
					if sc.state != serving && o.warmup > 0 {
						verb := "registering"
						if sc.state == drained {
							verb = "undraining"
						}
						sc.log.Info(fmt.Sprintf("health check passed; %s once checks have passed for --warmup %v", verb, o.warmup))
					}
				}
				if time.Since(passing) >= o.warmup {
					want = serving
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		sc.apply(ctx, want, failed)
		for next := false; !next; {
			sc.watch.turned()
			select {
			case <-ctx.Done():
				return nil
			case <-checkTick.C:
				next = true
			case <-sc.registered:
				sc.waiting = false
				sc.follow()
			case <-sc.warnTick.C:
				sc.follow()
			}
		}
	}
}

// apply registers, drains or undrains the instance when want changes.
// The instance is deregistered only on exit (close).
func (sc *sidecar) apply(ctx context.Context, want sidecarState, failed int) {
	if want == sc.state {
		sc.follow()
		return
	}
	rctx, cancel := context.WithTimeout(ctx, sc.g.timeout)
	defer cancel()
	in := sc.o.in
	in.Draining = in.Draining || want == drained
	if err := sc.reg.Register(rctx, in); err != nil && !errors.Is(err, registry.ErrPending) {
		sc.log.Error("cannot register", "error", err)
		return
	}
	was := sc.state
	sc.state = want
	sc.watch.state.Store(int32(want))
	switch {
	case want == drained:
		sc.log.Info(fmt.Sprintf("drained (weight 0: no new calls): %d health checks failed in a row", failed))
	case was == drained:
		sc.log.Info("undrained: the health check passes again")
	}
	sc.follow() // warns if etcd has not taken the change yet
}

// follow logs what changed in the registrar's state: "registered" once
// the instance is in etcd, and while it is not, a warning every
// registerWarnEvery.
func (sc *sidecar) follow() {
	if sc.state == unregistered {
		return
	}
	st := sc.watch.status()
	if !st.Registered && !sc.waiting {
		sc.waiting = true
		sc.wait()
	}
	switch {
	case st.Registered && !sc.announced:
		sc.announced, sc.inEtcd = true, true
		msg := "registered"
		if sc.o.in.Draining {
			msg += " drained (weight 0: no new calls)"
		}
		sc.log.Info(msg)
	case !st.Registered && sc.announced:
		sc.announced = false
		sc.warn("registration lost", st)
	case !st.Registered && time.Since(sc.lastWarn) >= registerWarnEvery-time.Second/2:
		sc.warn("not registered yet", st)
	}
}

// warn says that the instance is not registered, and why.
func (sc *sidecar) warn(what string, st registry.RegistrarStatus) {
	sc.lastWarn = time.Now()
	sc.warnTick.Reset(registerWarnEvery)
	why := sc.where
	if e := st.LastError; e == nil || unanswered(e) {
		why += " does not answer"
	} else {
		why += " did not take the registration"
	}
	msg := fmt.Sprintf("%s: %s; retrying until it does (this repeats every %v)", what, why, registerWarnEvery)
	sc.log.Warn(msg, "error", sc.lastError(st.LastError))
}

// lastError is the last error from etcd, in a form to log.
func (sc *sidecar) lastError(err error) string {
	if last := sc.reg.Status().LastError; last != nil {
		err = last
	}
	if err == nil {
		return "no answer yet"
	}
	var ce *etcd.ConnectionError
	if errors.As(err, &ce) {
		return ce.Cause
	}
	return err.Error()
}

// close revokes the registrar's lease and says whether that deregistered
// anything.
func (sc *sidecar) close() {
	if sc.reg.Status().Registered {
		sc.inEtcd = true // registered since the last look
	}
	err := sc.reg.Close()
	switch {
	case err != nil && sc.inEtcd:
		sc.log.Error(fmt.Sprintf("could not deregister on exit: the entry expires within --ttl %v", sc.o.ttl), "error", err)
	case sc.inEtcd:
		sc.log.Info("deregistered on exit")
	case sc.state != unregistered:
		sc.log.Info("exiting; the instance was never registered (etcd did not answer), so there is nothing to deregister")
	default:
		sc.log.Info("exiting; the instance is not registered, nothing to deregister")
	}
}
