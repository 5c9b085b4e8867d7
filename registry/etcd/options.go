package etcd

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/musterhq/muster/registry"
)

// Defaults used when an option is not given.
const (
	defaultTTL            = 10 * time.Second
	defaultRequestTimeout = 5 * time.Second
	defaultBackoffMin     = 100 * time.Millisecond
	defaultBackoffMax     = 5 * time.Second
	defaultProgressEvery  = 2 * time.Second
	defaultLinger         = 0
	defaultAuditEvery     = 5 * time.Second

	// minTTL is the shortest lease TTL etcd grants as asked: it counts
	// TTLs in whole seconds.
	minTTL = time.Second
)

type options struct {
	prefix         string
	ttl            time.Duration
	requestTimeout time.Duration
	backoffMin     time.Duration
	backoffMax     time.Duration
	progressEvery  time.Duration
	linger         time.Duration
	auditEvery     time.Duration
	logger         *slog.Logger
	layout         Layout   // nil: Muster's own
	mirrors        []Mirror // other layouts a Registrar also writes
	maxTxnOps      int      // operations per transaction of a Registrar
	setBy          string   // who SetPolicy records; "": nobody
	by             string   // who the journal records; "": the etcd user, else the OS user
	source         string   // where the journal records the write from
	journal        int      // records kept per service
	// err collects the invalid options; a constructor given any fails.
	err error
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
		auditEvery:     defaultAuditEvery,
		maxTxnOps:      defaultMaxTxnOps,
		source:         registry.SourceLibrary,
		journal:        registry.DefaultJournal,
		logger:         slog.Default(),
	}
}

// buildOptions applies opts over the defaults. An invalid option leaves
// its default in place and is reported in the result's err.
func buildOptions(opts []Option) options {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// invalid records an invalid option.
func (o *options) invalid(format string, args ...any) {
	o.err = errors.Join(o.err, fmt.Errorf("etcd: "+format, args...))
}

// Option configures a Registrar or a Discovery. Options that concern only
// one of them are ignored by the other. An invalid option makes the
// constructor (or function) it is passed to fail with an error naming it.
type Option func(*options)

// WithPrefix sets the key prefix under which services live. The default is
// registry.DefaultPrefix ("/muster/services"). An empty prefix or "/" is an
// error. Registrars and Discoveries must use the same prefix to see each
// other.
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if prefix == "" || prefix == "/" {
			o.invalid("WithPrefix(%q): the prefix must name a key range other than the root", prefix)
			return
		}
		o.prefix = prefix
	}
}

// WithTTL sets the lease TTL of a Registrar: how long its instances outlive
// the process when it dies without Close. The default is 10s. etcd counts
// whole seconds, so the TTL is rounded up to a second; a TTL below 1s is an
// error. (An etcd server also raises a TTL below its own minimum, 1.5 ×
// its election timeout, to that minimum.)
//
// The registrar renews the lease every TTL/3 and gives each renewal TTL/6
// to be answered: a member that does not answer in time (frozen, or cut off
// by a partition that keeps its connections open) is left for another
// member at once, so a lease is renewed at the latest TTL/2 after its last
// renewal while a quorum is reachable, half a TTL before it would expire.
func WithTTL(ttl time.Duration) Option {
	return func(o *options) {
		if ttl < minTTL {
			o.invalid("WithTTL(%v): the TTL must be at least %v (etcd counts lease TTLs in whole seconds)", ttl, minTTL)
			return
		}
		o.ttl = ttl
	}
}

// WithRequestTimeout bounds each etcd request (grant, put, delete, revoke,
// get) and how long Register waits before it reports registry.ErrPending.
// The default is 5s; a non-positive value is an error.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.invalid("WithRequestTimeout(%v): the timeout must be positive", d)
			return
		}
		o.requestTimeout = d
	}
}

// WithBackoff sets the retry delays after a failure: from min doubling to
// max, with jitter. The default is 100ms to 5s. A non-positive min, or a
// max below min, is an error.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) {
		if min <= 0 || max < min {
			o.invalid("WithBackoff(%v, %v): want 0 < min <= max", min, max)
			return
		}
		o.backoffMin, o.backoffMax = min, max
	}
}

// WithProgressInterval sets how often a Discovery asks etcd to confirm that
// a quiet watch is still live. When nothing (event or progress) arrives
// for 2.5 intervals, the snapshot is marked stale and the service is
// reloaded and watched again, through another member if one went silent.
// The default is 2s; a non-positive value is an error.
func WithProgressInterval(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.invalid("WithProgressInterval(%v): the interval must be positive", d)
			return
		}
		o.progressEvery = d
	}
}

// WithLinger keeps a Discovery's watch of a service, and its cache, alive
// for d after its last watcher closes, so that a gRPC channel leaving and
// re-entering idle mode finds it warm. The default is 0 (stop at once); a
// negative value is an error.
func WithLinger(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.invalid("WithLinger(%v): the duration must not be negative", d)
			return
		}
		o.linger = d
	}
}

// WithAuditInterval sets how often a Registrar checks that etcd still holds
// every key it wrote under its lease (one LeaseTimeToLive request with the
// attached keys) and that etcd's history did not go back below its last
// write (a restore from a backup). A key found missing is written again at
// once; after a rewind every key is. Deletions are noticed sooner, through a
// watch: this audit catches what a watch cannot see. The default is 5s; a
// non-positive value is an error.
func WithAuditInterval(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.invalid("WithAuditInterval(%v): the interval must be positive", d)
			return
		}
		o.auditEvery = d
	}
}

// WithLogger sets the logger. The default is slog.Default(); nil is an
// error.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			o.invalid("WithLogger(nil): the logger must not be nil")
			return
		}
		o.logger = l
	}
}

// WithSetBy makes SetPolicy record who sets the policy, as "alice
// (console)", and when (registry.PolicyInfo; etcd.GetPolicyInfo reads
// them). The default records neither. An empty name, or one that
// registry.PolicyInfo.Validate refuses (longer than registry.MaxSetByLen
// bytes, or not printable UTF-8), is an error.
func WithSetBy(who string) Option {
	return func(o *options) {
		if err := (registry.PolicyInfo{SetBy: who}).Validate(); who == "" || err != nil {
			o.invalid("WithSetBy(%.64q): want 1 to %d bytes of printable UTF-8", who, registry.MaxSetByLen)
			return
		}
		o.setBy = who
	}
}

// WithBy sets who the journal records as making an operator write
// (SetOverride, ClearOverride, Delete, SetCanary, ClearCanary, SetPolicy,
// ClearPolicy): a console user, an etcd user. The default is the client's
// etcd user name if it logs in with one, else the process's OS user. A
// name that registry.ValidateWho refuses (empty, longer than
// registry.MaxSetByLen bytes, not printable UTF-8) is an error.
func WithBy(who string) Option {
	return func(o *options) {
		if err := registry.ValidateWho(who); err != nil {
			o.invalid("WithBy(%.64q): %v", who, err)
			return
		}
		o.by = who
	}
}

// WithSource sets where the journal records an operator write as made
// from: registry.SourceCommand, registry.SourceConsole, or a program's
// own name. The default is registry.SourceLibrary ("library"). A name
// that registry.ValidateSource refuses is an error.
func WithSource(source string) Option {
	return func(o *options) {
		if err := registry.ValidateSource(source); err != nil {
			o.invalid("WithSource(%.64q): %v", source, err)
			return
		}
		o.source = source
	}
}

// WithJournalSize sets how many records of operator writes the journal
// keeps per service: each write takes the slot of the oldest once n are
// kept, and removes the slots from n up, which a larger size used before
// left. The default is registry.DefaultJournal (100); n below 1 or above
// registry.MaxJournal (10,000) is an error.
func WithJournalSize(n int) Option {
	return func(o *options) {
		if n < 1 || n > registry.MaxJournal {
			o.invalid("WithJournalSize(%d): want 1..%d", n, registry.MaxJournal)
			return
		}
		o.journal = n
	}
}
