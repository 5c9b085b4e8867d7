package etcd

import (
	"log/slog"
	"time"

	"github.com/musterhq/muster/registry"
)

// Defaults used when an option is not given or given an invalid value.
const (
	defaultTTL            = 10 * time.Second
	defaultRequestTimeout = 5 * time.Second
	defaultBackoffMin     = 100 * time.Millisecond
	defaultBackoffMax     = 5 * time.Second
	defaultProgressEvery  = 2 * time.Second
	defaultLinger         = 0
)

type options struct {
	prefix         string
	ttl            time.Duration
	requestTimeout time.Duration
	backoffMin     time.Duration
	backoffMax     time.Duration
	progressEvery  time.Duration
	linger         time.Duration
	logger         *slog.Logger
}

func defaultOptions() options {
	return options{
		prefix:         registry.DefaultPrefix,
		ttl:            defaultTTL,
		requestTimeout: defaultRequestTimeout,
		backoffMin:     defaultBackoffMin,
		backoffMax:     defaultBackoffMax,
		progressEvery:  defaultProgressEvery,
		linger:         defaultLinger,
		logger:         slog.Default(),
	}
}

func buildOptions(opts []Option) options {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Option configures a Registrar or a Discovery. Options that concern only
// one of them are ignored by the other.
type Option func(*options)

// WithPrefix sets the key prefix under which services live. The default is
// registry.DefaultPrefix ("/muster/services"). An empty prefix or "/" keeps
// the default. Registrars and Discoveries must use the same prefix to see
// each other.
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if prefix != "" && prefix != "/" {
			o.prefix = prefix
		}
	}
}

// WithTTL sets the lease TTL of a Registrar: how long its instances outlive
// the process when it dies without Close. etcd counts whole seconds, so the
// TTL is rounded up to a second. The default is 10s; a value below 1s keeps
// the default.
func WithTTL(ttl time.Duration) Option {
	return func(o *options) {
		if ttl >= time.Second {
			o.ttl = ttl
		}
	}
}

// WithRequestTimeout bounds each etcd request (grant, put, delete, revoke,
// get) and how long Register waits before it reports registry.ErrPending.
// The default is 5s; a non-positive value keeps the default.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.requestTimeout = d
		}
	}
}

// WithBackoff sets the retry delays after a failure: from min doubling to
// max, with jitter. The default is 100ms to 5s. A non-positive min keeps
// the default min; a max below min becomes min.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) {
		if min > 0 {
			o.backoffMin = min
		}
		o.backoffMax = max
		if o.backoffMax < o.backoffMin {
			o.backoffMax = o.backoffMin
		}
	}
}

// WithProgressInterval sets how often a Discovery asks etcd to confirm that
// a quiet watch is still live. A snapshot is marked stale when nothing
// (event or progress) arrives for three intervals. The default is 2s; a
// non-positive value keeps the default.
func WithProgressInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.progressEvery = d
		}
	}
}

// WithLinger keeps a Discovery's watch of a service, and its cache, alive
// for d after its last watcher closes, so that a gRPC channel leaving and
// re-entering idle mode finds it warm. The default is 0 (stop at once); a
// negative value keeps the default.
func WithLinger(d time.Duration) Option {
	return func(o *options) {
		if d >= 0 {
			o.linger = d
		}
	}
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
