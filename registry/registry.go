package registry

import (
	"context"
	"errors"
	"time"
)

// Errors shared by every backend.
var (
	// ErrClosed is returned by calls on a Registrar, Discovery or Watcher
	// after its Close.
	ErrClosed = errors.New("registry: closed")
	// ErrPending is matched by the error Register returns when the
	// instance was accepted but could not be written before the context
	// ended (typically: the backend is unreachable). The registration is
	// kept and written as soon as the backend answers; Deregister
	// withdraws it.
	ErrPending = errors.New("registry: registration pending")
)

// Registrar announces instances in a registry and keeps them there for as
// long as the process lives.
//
// Implementations are safe for concurrent use. A Registrar retries on its
// own after any loss (backend outage, expired session) until Close: callers
// never have to register again.
type Registrar interface {
	// Register validates in and adds it to the registrar's set. It returns
	// nil once the instance is written to the backend. If ctx ends first,
	// the error matches ErrPending and the instance is still written as
	// soon as the backend answers. An invalid instance, or one the backend
	// refuses for good (such as a permission error), is not kept and the
	// error says why. Registering an instance with the same name and ID
	// again replaces its value.
	Register(ctx context.Context, in Instance) error
	// Deregister removes the instance of service name with ID id (the ID
	// it was registered under: Instance.Normalize defaults it to Addr) from
	// the set and deletes it from the backend, returning once it is
	// deleted or ctx ends. It takes the two parts of the instance's key,
	// not an Instance, because nothing else identifies it. Deregistering
	// an unknown instance is not an error.
	Deregister(ctx context.Context, name, id string) error
	// Close stops the registrar and removes every instance it registered at
	// once (for etcd: it revokes the lease). It is idempotent: later calls
	// do nothing and return the first call's result. Register after Close
	// returns ErrClosed.
	Close() error
}

// RegistrarStatus is what a Registrar reports about itself.
type RegistrarStatus struct {
	// Registered is true while the registrar holds a live session (etcd:
	// a lease) and every instance in its set is written.
	Registered bool
	// Since is when Registered last changed.
	Since time.Time
	// Session identifies the backend session holding the instances (etcd:
	// the lease ID); 0 when there is none.
	Session int64
	// Instances is the number of instances in the registrar's set.
	Instances int
	// Pending is how many of them are not written under the current
	// session.
	Pending int
	// Reregistrations counts how many times the session was lost and a new
	// one was established.
	Reregistrations uint64
	// LastError is the last error talking to the backend, nil if none since
	// the last success.
	LastError error
	// LastErrorAt is when LastError happened.
	LastErrorAt time.Time
	// Failures counts failed attempts to reach the desired state (each
	// is retried).
	Failures uint64
	// Refusals counts the failures the backend refused for the
	// registrar's identity (etcd: a password or token refused, permission
	// denied): credentials or a role to fix, not a network.
	Refusals uint64
	// Repairs counts instances written again because the backend lost
	// them while the session lived (deleted by hand, lost in a restore
	// from a backup).
	Repairs uint64
	// Revocations counts sessions the backend ended while they were still
	// kept alive, before their TTL ran out (etcd: a lease revoked by
	// hand, or by a member that led the cluster and was paused for longer
	// than the TTL, which on resuming revokes the leases it believes
	// expired). Each is followed by a re-registration.
	Revocations uint64
}

// StatusReporter is implemented by Registrars that report their state.
type StatusReporter interface {
	// Status returns the registrar's current state. It does not block.
	Status() RegistrarStatus
	// WaitRegistered blocks until Status().Registered is true or ctx ends,
	// returning ctx's error in the latter case.
	WaitRegistered(ctx context.Context) error
}

// DiscoveryStats is a Discovery's state in the shape every backend
// reports, for collectors such as package metrics. A backend's own Stats
// may say more.
type DiscoveryStats struct {
	// Services is the number of services followed now.
	Services int
	// Watchers is the number of open watchers, all services together.
	Watchers int
	// SkippedValues counts registry values left out because they could not
	// be read as an instance (malformed, of an unknown schema version, not
	// matching their key; for Kubernetes, endpoints that map to no valid
	// instance). Each bad value is counted once, however often it is read.
	SkippedValues uint64
	// Loads counts full reads of a service, the first ones included; 0
	// for a backend that does not read services whole itself (Kubernetes,
	// whose informers list and re-list on their own).
	Loads uint64
	// Resyncs counts the full reads after the first of a service: after
	// a watch ended, an error, a lost connection or session. 0 where Loads
	// is.
	Resyncs uint64
	// PerService describes each followed service, sorted by name.
	PerService []ServiceStats
}

// ServiceStats describes one service a Discovery follows.
type ServiceStats struct {
	// Name is the service as the Discovery follows it (for Kubernetes,
	// "name.namespace").
	Name string
	// Instances is the number of instances in its snapshot.
	Instances int
	// Watchers is the number of its open watchers.
	Watchers int
	// StaleSince is when its snapshot became stale; zero while fresh.
	StaleSince time.Time
	// Loaded is false until its first load completed.
	Loaded bool
	// Err is the error that made its snapshot stale (Snapshot.Err), nil
	// while fresh.
	Err error
}

// StatsReporter is implemented by Discoveries that report their state.
type StatsReporter interface {
	// DiscoveryStats returns the Discovery's current state. It does not
	// block on the backend and is safe for concurrent use.
	DiscoveryStats() DiscoveryStats
}

// Snapshot is the complete, current list of one service's instances as a
// Discovery sees it.
type Snapshot struct {
	// Service is the service name.
	Service string
	// Instances is every valid instance, sorted by ID. The slice and the
	// instances are shared and must not be modified. An instance that did
	// not change from one snapshot to the next is the same pointer in
	// both, so a consumer finds what changed by comparing pointers and
	// calling Equal only where they differ.
	Instances []*Instance
	// Revision is the backend's version of the data this snapshot reflects
	// (etcd: the store revision); 0 until the first load. Revisions
	// compare only within one Generation.
	Revision int64
	// Generation identifies the backend history Revision belongs to. It
	// changes when that history was replaced, so that revisions went
	// backwards or restarted (etcd: restored from a backup, restarted
	// empty, another cluster ID): a consumer that compares revisions
	// treats a snapshot of another generation as newer than anything it
	// has seen, whatever its revision. 0 until the first load.
	Generation uint64
	// Loaded is true once the list was read from the backend at least
	// once. An empty, loaded snapshot means the service has no instances;
	// an unloaded one means nothing is known yet.
	Loaded bool
	// StaleSince is zero while the backend is reachable and changes are
	// being followed; otherwise it is when that stopped. A stale snapshot
	// still holds the last known instances.
	StaleSince time.Time
	// Err is the last error that made the snapshot stale, nil when fresh.
	Err error
	// Clusters is set only by a Discovery over several independent
	// clusters (package registry/clusters): each cluster's part, sorted
	// by cluster name, whose instances together are Instances. Such a
	// snapshot is Stale while any cluster is, and StaleSince is the
	// earliest cluster's; a consumer that judges the list (the
	// resolver's empty-list protection) judges each part on its own.
	// Nil for every other Discovery.
	Clusters []ClusterSnapshot
	// Retired lists the IDs of instances deleted recently while Draining,
	// oldest first, at most MaxRetired; an instance registered again
	// leaves it. Such a deletion is deliberate: the instance was taken out
	// of service before it left (the etcd and ZooKeeper Registrars'
	// Deregister drains an instance before it deletes it). Any other deletion may be the
	// backend's mistake (etcd revokes live leases after a paused leader
	// resumes), and package resolver holds it for a grace. Nil when the
	// backend does not record deliberate departures: every deletion is
	// then final. The slice is shared and must not be modified.
	Retired []string
}

// MaxRetired is the most IDs Snapshot.Retired holds: the oldest go first.
const MaxRetired = 64

// Stale reports whether the snapshot may be behind the backend.
func (s Snapshot) Stale() bool { return !s.StaleSince.IsZero() }

// Discovery follows services in a registry.
//
// Implementations are safe for concurrent use and share one backend watch
// among all watchers of a service.
type Discovery interface {
	// Watch starts following service and returns at once, without waiting
	// for the backend: the watcher's first Snapshot may not be Loaded yet.
	// The watcher is closed when ctx ends or Close is called. The error is
	// non-nil only for an invalid service name or a closed Discovery.
	Watch(ctx context.Context, service string) (Watcher, error)
	// Close stops every watch and closes every watcher. It is idempotent.
	Close() error
}

// Watcher follows one service.
type Watcher interface {
	// Updates returns a channel that receives a value after the Snapshot
	// changes. Updates coalesce: a slow reader misses intermediate
	// snapshots, never the latest. The channel is closed when the watcher
	// is closed.
	Updates() <-chan struct{}
	// Snapshot returns the current snapshot. It does not block.
	Snapshot() Snapshot
	// Close stops the watcher. It is idempotent.
	Close() error
}

// ServiceLister is implemented by Discovery backends that can list the
// services present in the registry.
type ServiceLister interface {
	// Services returns the names of all services with at least one key,
	// sorted.
	Services(ctx context.Context) ([]string, error)
}
