package zookeeper

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/musterhq/muster/registry"
)

// Defaults used when an option is not given.
const (
	defaultSessionTimeout = 10 * time.Second
	defaultRequestTimeout = 5 * time.Second
	defaultAuditEvery     = 5 * time.Second
	defaultBackoffMin     = 100 * time.Millisecond
	defaultBackoffMax     = 5 * time.Second
)

type options struct {
	root           string
	sessionTimeout time.Duration
	requestTimeout time.Duration
	auditEvery     time.Duration
	logger         *slog.Logger
	// noNodeWatches leaves the audit as a Registrar's only repair (set by
	// tests, to check the audit alone).
	noNodeWatches bool
	err           error
}

func buildOptions(opts []Option) options {
	o := options{
		root:           registry.DefaultPrefix,
		sessionTimeout: defaultSessionTimeout,
		requestTimeout: defaultRequestTimeout,
		auditEvery:     defaultAuditEvery,
		logger:         slog.Default(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (o *options) invalid(format string, args ...any) {
	o.err = errors.Join(o.err, fmt.Errorf("zookeeper: "+format, args...))
}

// Option configures a Registrar, a Discovery or an override. Options that
// concern only one of them are ignored by the others. An invalid option
// makes the constructor it is passed to fail with an error naming it.
type Option func(*options)

// WithRoot sets the path under which services live; the default is
// registry.DefaultPrefix ("/muster/services"). It must be an absolute path
// other than "/", without a trailing slash. Registrars and Discoveries must
// use the same root to see each other.
func WithRoot(root string) Option {
	return func(o *options) {
		if !strings.HasPrefix(root, "/") || root == "/" || strings.HasSuffix(root, "/") || strings.Contains(root, "//") {
			o.invalid("WithRoot(%q): the root must be an absolute path other than \"/\", without a trailing slash", root)
			return
		}
		o.root = root
	}
}

// WithSessionTimeout sets the ZooKeeper session timeout a connection asks
// for: how long a Registrar's instances outlive a process that died without
// Close, and how long a connection may be cut before its session (and every
// ephemeral node of it) expires. The default is 10s; below 100ms is an
// error. The server bounds it to [2, 20] ticks by default (4s to 40s with
// its default 2s tick).
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) {
		if d < 100*time.Millisecond {
			o.invalid("WithSessionTimeout(%v): the timeout must be at least 100ms", d)
			return
		}
		o.sessionTimeout = d
	}
}

// WithRequestTimeout bounds how long Register and Deregister wait before
// Register reports registry.ErrPending, and each request of Services and of
// the override functions. The default is 5s; a non-positive value is an
// error.
func WithRequestTimeout(d time.Duration) Option {
	return positive("WithRequestTimeout", d, func(o *options) { o.requestTimeout = d })
}

// WithAuditInterval sets how often a Registrar reads back every node it
// owns and writes again any that is missing or altered (besides the watch
// that notices deletions at once). The default is 5s; a non-positive value
// is an error.
func WithAuditInterval(d time.Duration) Option {
	return positive("WithAuditInterval", d, func(o *options) { o.auditEvery = d })
}

// WithLogger sets the logger (default slog.Default()). The ZooKeeper
// client library's own messages go to it at debug level. A nil logger is
// an error.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			o.invalid("WithLogger(nil): the logger must not be nil")
			return
		}
		o.logger = l
	}
}

// positive returns an option that applies set when d is positive and is
// invalid, naming the option, otherwise.
func positive(name string, d time.Duration, set func(*options)) Option {
	return func(o *options) {
		if d <= 0 {
			o.invalid("%s(%v): the duration must be positive", name, d)
			return
		}
		set(o)
	}
}
