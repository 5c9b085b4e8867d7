package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/promsd"
)

// Defaults used when an option is not given or given an invalid value.
const (
	// DefaultDrainDelay is how long Shutdown waits, after deregistering,
	// for clients to stop picking the server before it stops accepting
	// calls. Measured here (docs/BENCHMARKS.md), a deregistration reaches
	// a client's balancer within a few milliseconds on a local network;
	// two seconds leaves room for a loaded etcd, a distant client and a
	// slow resolver while keeping a rolling restart brisk.
	DefaultDrainDelay = 2 * time.Second
	// DefaultShutdownTimeout is how long the function Serve allows
	// Shutdown (WithShutdownTimeout): the drain delay, then the calls in
	// flight; past it, connections close with calls still running.
	DefaultShutdownTimeout = 30 * time.Second
	defaultRegisterTimeout = 2 * time.Second
)

type options struct {
	drainDelay      time.Duration
	registerTimeout time.Duration
	shutdownTimeout time.Duration
	grpcOptions     []grpc.ServerOption
	logger          *slog.Logger
	noColor         bool
	metricsAddr     string // "" for none
	warmup          func(context.Context) error
	warmupAttempts  int
	warmupBackoff   time.Duration
	err             error // the first invalid option that New reports
}

func buildOptions(opts []Option) options {
	o := options{
		drainDelay:      DefaultDrainDelay,
		registerTimeout: defaultRegisterTimeout,
		shutdownTimeout: DefaultShutdownTimeout,
		logger:          slog.Default(),
		warmupAttempts:  1,
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// fail records the first invalid option, for New to report.
func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// Option configures a Server.
type Option func(*options)

// WithDrainDelay sets how long Shutdown waits between deregistering and
// stopping to accept calls (DefaultDrainDelay, 2s). Zero skips the wait; a
// negative value keeps the default.
func WithDrainDelay(d time.Duration) Option {
	return func(o *options) {
		if d >= 0 {
			o.drainDelay = d
		}
	}
}

// WithRegisterTimeout bounds how long Serve waits for the first
// registration before serving on regardless; the registrar keeps trying in
// the background (registry.ErrPending). The default is 2s; a non-positive
// value keeps the default.
func WithRegisterTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.registerTimeout = d
		}
	}
}

// WithShutdownTimeout sets how long the function Serve allows Shutdown
// once the process gets SIGINT or SIGTERM or its context ends: the drain
// delay (WithDrainDelay), then the calls in flight; past it, connections
// close with calls still running. The default is DefaultShutdownTimeout
// (30s). Run takes its timeout as an argument and New ignores this
// option. A non-positive timeout makes Serve and New fail with an error
// naming it.
func WithShutdownTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.fail(fmt.Errorf("server: WithShutdownTimeout: %v, want a positive timeout", d))
			return
		}
		o.shutdownTimeout = d
	}
}

// WithGRPCOptions adds options to the grpc.Server that New builds
// (credentials, interceptors, limits). Muster chains the color
// interceptors (see WithoutColorPropagation) before the interceptors given
// here, so that they see the call's color, and its own stream interceptor
// after them.
func WithGRPCOptions(opts ...grpc.ServerOption) Option {
	return func(o *options) { o.grpcOptions = append(o.grpcOptions, opts...) }
}

// WithLogger sets the logger. The default is slog.Default(); nil keeps the
// default.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithoutColorPropagation leaves out the interceptors that copy the color
// of each incoming call to the handler's context (color.UnaryServerInterceptor
// and color.StreamServerInterceptor), which New installs by default so that
// a colored request reaches the same color of every service along its path.
func WithoutColorPropagation() Option {
	return func(o *options) { o.noColor = true }
}

// WithMetricsAddr makes the server's instance declare where its metrics are
// served, as the metadata key promsd.MetadataKey ("metrics"), for
// Prometheus's HTTP service discovery (package promsd, docs/PROMETHEUS.md):
// host:port, or :port for the host of the instance's address. It replaces
// a value the instance's Metadata holds. By default the key is left as the
// instance has it. An invalid address (no port, a port outside 1..65535, a
// host that is neither an IP address nor a DNS name) makes New fail with
// an error naming it.
func WithMetricsAddr(addr string) Option {
	return func(o *options) {
		if err := promsd.ValidateMetricsAddr(addr); err != nil {
			o.fail(fmt.Errorf("server: WithMetricsAddr: %w", err))
			return
		}
		o.metricsAddr = addr
	}
}

// WithWarmup makes Serve run warm before it takes traffic: after the
// server listens and serves (so warm may call the server itself, through
// the listener's address) and while its health is still NOT_SERVING,
// Serve calls warm and waits for it; only when it returns nil does the
// health become SERVING and the instance get registered, so no client of
// the registry sees the instance before. warm's context ends when
// Shutdown begins. If warm fails (after the attempts WithWarmupRetry
// allows), nothing is registered and Serve stops the server and returns
// an error wrapping warm's. By default there is no warm-up; a nil warm
// makes New fail.
func WithWarmup(warm func(ctx context.Context) error) Option {
	return func(o *options) {
		if warm == nil {
			o.fail(errors.New("server: WithWarmup: nil warm-up function"))
			return
		}
		o.warmup = warm
	}
}

// WithWarmupRetry lets Serve call the warm-up (WithWarmup) up to attempts
// times, waiting backoff after each failure, before it gives up. The
// default is one attempt. attempts below 1 or a negative backoff makes New
// fail with an error naming it.
func WithWarmupRetry(attempts int, backoff time.Duration) Option {
	return func(o *options) {
		switch {
		case attempts < 1:
			o.fail(fmt.Errorf("server: WithWarmupRetry: attempts %d, want at least 1", attempts))
		case backoff < 0:
			o.fail(fmt.Errorf("server: WithWarmupRetry: negative backoff %v", backoff))
		default:
			o.warmupAttempts, o.warmupBackoff = attempts, backoff
		}
	}
}
