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
	by             string   // who makes an operator write (WithBy); "": not named
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
func buildOptions[O StoreOption](opts []O) options {
	o := defaultOptions()
	for _, opt := range opts {
		opt.apply(&o)
	}
	return o
}

// invalid records an invalid option.
func (o *options) invalid(format string, args ...any) {
	o.err = errors.Join(o.err, fmt.Errorf("etcd: "+format, args...))
}

// StoreOption configures a Store (Open, NewStore). Every option of the
// package is one: the Store applies each to the parts it concerns.
type StoreOption interface {
	apply(*options)
}

// RegistrarOption configures a Registrar (NewRegistrar): an Option, a
// WatchOption, or one only a Registrar reads (WithTTL, WithAuditInterval,
// WithMirror, WithMaxTxnOps).
type RegistrarOption interface {
	StoreOption
	registrarOption()
}

// DiscoveryOption configures a Discovery (NewDiscovery): an Option, a
// WatchOption, or one only a Discovery reads (WithLinger, WithLayout).
type DiscoveryOption interface {
	StoreOption
	discoveryOption()
}

// WatchOption configures what watches etcd: a Registrar (its own keys), a
// Discovery, and the settings' followers (NewCanaries, NewPolicies). It is
// an Option or one of WithBackoff, WithProgressInterval and WithLogger.
type WatchOption interface {
	RegistrarOption
	DiscoveryOption
	watchOption()
}

// WriteOption configures an operator write (SetOverride, ClearOverride,
// Delete, SetCanary, ClearCanary, SetPolicy, ClearPolicy): an Option, or
// one of WithBy, WithSource and WithJournalSize, which say how the write
// is recorded.
type WriteOption interface {
	StoreOption
	writeOption()
}

// Option is an option every constructor and function of the package
// takes: WithPrefix and WithRequestTimeout. It satisfies every option
// interface; the reads (GetPolicy, GetPolicyInfo, History) take only
// these.
type Option func(*options)

func (f Option) apply(o *options) { f(o) }
func (Option) registrarOption()   {}
func (Option) discoveryOption()   {}
func (Option) watchOption()       {}
func (Option) writeOption()       {}

// setter is the body of every option.
type setter func(*options)

func (f setter) apply(o *options) { f(o) }

// The concrete types of the options of one group.
type (
	registrarOnly struct{ setter }
	discoveryOnly struct{ setter }
	watchOnly     struct{ setter }
	writeOnly     struct{ setter }
)

// An Option is an option of every group; a WatchOption is a Registrar's
// and a Discovery's.
var (
	_ WatchOption     = Option(nil)
	_ WriteOption     = Option(nil)
	_ WatchOption     = watchOnly{}
	_ RegistrarOption = registrarOnly{}
	_ DiscoveryOption = discoveryOnly{}
	_ WriteOption     = writeOnly{}
)

func (registrarOnly) registrarOption() {}
func (discoveryOnly) discoveryOption() {}
func (watchOnly) registrarOption()     {}
func (watchOnly) discoveryOption()     {}
func (watchOnly) watchOption()         {}
func (writeOnly) writeOption()         {}

// WithPrefix sets the key prefix under which services live. The default is
// registry.DefaultPrefix ("/muster/services"). An empty prefix or "/" is an
// error. Registrars and Discoveries must use the same prefix to see each
// other. Every constructor and function of the package takes it.
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
// NewRegistrar, Open and NewStore take it.
func WithTTL(ttl time.Duration) RegistrarOption {
	return registrarOnly{func(o *options) {
		if ttl < minTTL {
			o.invalid("WithTTL(%v): the TTL must be at least %v (etcd counts lease TTLs in whole seconds)", ttl, minTTL)
			return
		}
		o.ttl = ttl
	}}
}

// WithRequestTimeout bounds each etcd request (grant, put, delete, revoke,
// get) and how long Register waits before it reports registry.ErrPending.
// The default is 5s; a non-positive value is an error. Every constructor
// and function of the package takes it.
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
// max below min, is an error. What watches etcd takes it (NewRegistrar,
// NewDiscovery, NewCanaries, NewPolicies), and Open and NewStore.
func WithBackoff(min, max time.Duration) WatchOption {
	return watchOnly{func(o *options) {
		if min <= 0 || max < min {
			o.invalid("WithBackoff(%v, %v): want 0 < min <= max", min, max)
			return
		}
		o.backoffMin, o.backoffMax = min, max
	}}
}

// WithProgressInterval sets how often a watch asks etcd to confirm that
// it is still live while quiet: a Discovery's of a service, a Registrar's
// of its own keys, the settings' followers' (NewCanaries, NewPolicies).
// When nothing (event or progress) arrives for 2.5 intervals, the watch is
// given up and the keys are read and watched again, through another
// member if one went silent (a Discovery marks its snapshot stale
// meanwhile). The default is 2s; a non-positive value is an error.
// NewRegistrar, NewDiscovery, NewCanaries, NewPolicies, Open and NewStore
// take it.
func WithProgressInterval(d time.Duration) WatchOption {
	return watchOnly{func(o *options) {
		if d <= 0 {
			o.invalid("WithProgressInterval(%v): the interval must be positive", d)
			return
		}
		o.progressEvery = d
	}}
}

// WithLinger keeps a Discovery's watch of a service, and its cache, alive
// for d after its last watcher closes, so that a gRPC channel leaving and
// re-entering idle mode finds it warm. The default is 0 (stop at once); a
// negative value is an error. NewDiscovery, Open and NewStore take it.
func WithLinger(d time.Duration) DiscoveryOption {
	return discoveryOnly{func(o *options) {
		if d < 0 {
			o.invalid("WithLinger(%v): the duration must not be negative", d)
			return
		}
		o.linger = d
	}}
}

// WithAuditInterval sets how often a Registrar checks that etcd still holds
// every key it wrote under its lease (one LeaseTimeToLive request with the
// attached keys) and that etcd's history did not go back below its last
// write (a restore from a backup). A key found missing is written again at
// once; after a rewind every key is. Deletions are noticed sooner, through a
// watch: this audit catches what a watch cannot see. The default is 5s; a
// non-positive value is an error. NewRegistrar, Open and NewStore take it.
func WithAuditInterval(d time.Duration) RegistrarOption {
	return registrarOnly{func(o *options) {
		if d <= 0 {
			o.invalid("WithAuditInterval(%v): the interval must be positive", d)
			return
		}
		o.auditEvery = d
	}}
}

// WithLogger sets the logger of what runs in the background: a
// Registrar, a Discovery, the settings' followers. The default is
// slog.Default(); nil is an error. NewRegistrar, NewDiscovery,
// NewCanaries, NewPolicies, Open and NewStore take it.
func WithLogger(l *slog.Logger) WatchOption {
	return watchOnly{func(o *options) {
		if l == nil {
			o.invalid("WithLogger(nil): the logger must not be nil")
			return
		}
		o.logger = l
	}}
}

// WithBy names who makes an operator write (SetOverride, ClearOverride,
// Delete, SetCanary, ClearCanary, SetPolicy, ClearPolicy): a console user,
// an etcd user. The journal records it as the write's who; without WithBy
// it records the client's etcd user name if it logs in with one, else the
// process's OS user. SetPolicy also records it in the policy, with the
// write's source (WithSource), as "alice (console)", and when
// (registry.PolicyInfo; GetPolicyInfo reads them); without WithBy the
// policy records neither. A name that registry.ValidateWho refuses
// (empty, longer than registry.MaxSetByLen bytes, not printable UTF-8) is
// an error. The writes, Open and NewStore take it (a Store's Admin names
// its Actor with it).
func WithBy(who string) WriteOption {
	return writeOnly{func(o *options) {
		if err := registry.ValidateWho(who); err != nil {
			o.invalid("WithBy(%.64q): %v", who, err)
			return
		}
		o.by = who
	}}
}

// WithSource sets where the journal records an operator write as made
// from: registry.SourceCommand, registry.SourceConsole, or a program's
// own name. The default is registry.SourceLibrary ("library"). A name
// that registry.ValidateSource refuses is an error. The writes, Open and
// NewStore take it.
func WithSource(source string) WriteOption {
	return writeOnly{func(o *options) {
		if err := registry.ValidateSource(source); err != nil {
			o.invalid("WithSource(%.64q): %v", source, err)
			return
		}
		o.source = source
	}}
}

// WithJournalSize sets how many records of operator writes the journal
// keeps per service: each write takes the slot of the oldest once n are
// kept, and removes the slots from n up, which a larger size used before
// left. The default is registry.DefaultJournal (100); n below 1 or above
// registry.MaxJournal (10,000) is an error. The writes, Open and NewStore
// take it.
func WithJournalSize(n int) WriteOption {
	return writeOnly{func(o *options) {
		if n < 1 || n > registry.MaxJournal {
			o.invalid("WithJournalSize(%d): want 1..%d", n, registry.MaxJournal)
			return
		}
		o.journal = n
	}}
}
