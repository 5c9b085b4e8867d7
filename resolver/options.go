package resolver

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/musterhq/muster/internal/served"
)

// Defaults used when an option is not given.
const (
	// DefaultScheme is the URI scheme of targets a Builder resolves.
	DefaultScheme = "muster"
	// DefaultDeletionGrace is how long a channel keeps serving an
	// instance that vanished from the registry while it served
	// (WithDeletionGrace).
	DefaultDeletionGrace = served.DefaultDeletionGrace
)

type options struct {
	scheme string
	zone   string
	region string
	// served is what the channels' pipeline applies: filters' fallback,
	// first-state timeout, protection, deletion grace, disk snapshots,
	// subsetting, settings.
	served   served.Config
	logger   *slog.Logger
	policyLB string // WithPolicyServiceConfig's loadBalancingConfig; "" for none
	lb       string // WithBalancer's name; "" for none
	lbSet    bool   // WithBalancer was given
	// err collects the invalid options: New fails with it, and a
	// NewBuilder's Build.
	err error
}

func buildOptions(opts []Option) options {
	o := options{
		scheme: DefaultScheme,
		served: served.Defaults(),
		logger: slog.Default(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.lbSet && o.policyLB != "" {
		o.invalid("WithBalancer and WithPolicyServiceConfig both choose the channels' balancer: give one")
	}
	return o
}

// invalid records an invalid option; its default stays in place.
func (o *options) invalid(format string, args ...any) {
	o.err = errors.Join(o.err, fmt.Errorf("resolver: "+format, args...))
}

// Option configures a Builder. An invalid option makes New fail with an
// error naming it (every invalid option is named), and every Build of a
// Builder from NewBuilder fail with that error.
type Option func(*options)

// WithScheme sets the target scheme the Builder resolves. The default is
// DefaultScheme ("muster"). An empty scheme is an error.
func WithScheme(scheme string) Option {
	return func(o *options) {
		if scheme == "" {
			o.invalid("WithScheme(\"\"): the scheme must not be empty")
			return
		}
		o.scheme = scheme
	}
}

// WithZone sets the client's own zone, for channels whose target names
// none: Muster's balancers prefer instances in it (see LocalityOf). The
// default is no preference.
func WithZone(zone string) Option {
	return func(o *options) { o.zone = zone }
}

// WithRegion sets the client's own region, for channels whose target names
// none: after its zone, Muster's balancers prefer the other zones of its
// region (see LocalityOf). The default is no preference.
func WithRegion(region string) Option {
	return func(o *options) { o.region = region }
}

// WithZoneFallback says what a channel with a zone or a region resolves
// to: every instance that passes the other filters, with the client's
// locality for the balancer to prefer the near ones and spill to the
// others by health (true, the default), or only the instances of the zone
// (of the region, for a channel with a region and no zone), so that calls
// fail instead of crossing zones (false).
func WithZoneFallback(fallback bool) Option {
	return func(o *options) { o.served.ZoneFallback = fallback }
}

// WithFirstStateTimeout bounds how long a new channel waits for the first
// load of its service when nothing is known yet (no cache, no disk
// snapshot). When it passes, or the load fails first, the channel gets a
// resolver error: calls that do not wait for ready fail with Unavailable
// instead of hanging until their deadline, and the channel recovers by
// itself when the service loads. It bounds as well how long the first state
// waits for the service's settings (WithCanaries, WithPolicies). The
// default is 500ms; a non-positive value is an error.
func WithFirstStateTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.invalid("WithFirstStateTimeout(%v): the timeout must be positive", d)
			return
		}
		o.served.FirstState = d
	}
}

// WithProtection configures empty-list protection. An update that would
// leave fewer than fraction times the largest list served within the last
// window is withheld, and the last accepted list keeps being served. Judging
// over a window catches a mass expiry that etcd delivers as a trickle of
// deletes (about 1,000 a second); during a run of losses (each within a
// window of the previous one, with no growth in between) the window is held
// at the one before the run began, so a trickle longer than the window is
// judged against the size before it too. Protection lifts when the list
// grows back, or a window after the last loss (and at least a window after
// it started) even if the registry reports nothing more: a service that
// really shrank is then served as it is. The price: a scale-down that sheds
// more than that share without a pause (each removal within a window of the
// previous) is held too, until a window after its last removal; meanwhile
// the removed instances stay listed, their connections fail, and Muster's
// balancers (and gRPC's) pick only ready endpoints.
//
// The default is fraction 0.5 over 30s: losing more than half of a service
// at once is far likelier a registry-side failure (leases expiring while
// the servers still run) than a deliberate scale-down, and dialing a few
// dead addresses costs less than an empty list, which fails every call. A
// fraction of 0 disables protection; a fraction outside 0..1 or a
// non-positive window is an error.
func WithProtection(fraction float64, window time.Duration) Option {
	return func(o *options) {
		if !(fraction >= 0 && fraction <= 1) || window <= 0 {
			o.invalid("WithProtection(%v, %v): want a fraction in 0..1 and a positive window", fraction, window)
			return
		}
		o.served.ProtectFraction = fraction
		o.served.ProtectWindow = window
	}
}

// WithDeletionGrace sets how long a channel keeps serving an instance that
// left the registry while it served: one that was not Draining and whose
// deletion the registry does not record as deliberate (registry.Snapshot's
// Retired; the etcd Registrar's Deregister drains an instance before it
// deletes it, so such an instance leaves at once). etcd revokes live
// leases after a paused leader resumes, and the registrar writes its keys
// again within milliseconds: the instance's return (any instance with its
// ID) ends the hold, so the channel keeps its connection and calls never
// notice. An instance that crashed stays listed for the grace, but its
// connection has failed and balancers pick only ready endpoints. The hold
// is beside empty-list protection (WithProtection), which judges the same
// lists either way. A backend that records no deliberate departures
// (Retired nil: Kubernetes) gets no grace.
//
// The default is DefaultDeletionGrace (3s), above the registrar's repair
// time measured under load (docs/RELIABILITY.md); 0 disables the grace; a
// negative value keeps the default.
func WithDeletionGrace(d time.Duration) Option {
	return func(o *options) {
		if d >= 0 {
			o.served.DeletionGrace = d
		}
	}
}

// WithSnapshotDir keeps the last good list of each resolved service in
// dir, written atomically whenever it changes, also when the registry's
// history was replaced (etcd restored from a backup or restarted empty: a
// new generation, or revisions going back). A channel built while the
// registry is unreachable starts from it (its age is logged). A corrupt or
// foreign file is ignored with a logged error. The default is no
// snapshots.
func WithSnapshotDir(dir string) Option {
	return func(o *options) { o.served.SnapshotDir = dir }
}

// WithSubset makes each channel connect to at most size instances of its
// service, chosen by rendezvous hashing on the client ID (WithClientID)
// after the target's filters: every client picks its own stable subset,
// clients spread evenly over the instances, removing an instance outside a
// client's subset changes nothing for it, and removing one inside replaces
// just that one. Use it for services with more instances than a client
// should hold connections to. The default, 0, is no subsetting; a negative
// size is an error.
func WithSubset(size int) Option {
	return func(o *options) {
		if size < 0 {
			o.invalid("WithSubset(%d): the size must not be negative (0 is no subsetting)", size)
			return
		}
		o.served.SubsetSize = size
	}
}

// WithClientID sets the identity subsetting hashes on (WithSubset). It
// must differ between the client processes of a service, and stay the same
// for the life of one. The default is "<hostname>:<pid>"; an empty ID is
// an error.
func WithClientID(id string) Option {
	return func(o *options) {
		if id == "" {
			o.invalid("WithClientID(\"\"): the ID must not be empty")
			return
		}
		o.served.ClientID = id
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
