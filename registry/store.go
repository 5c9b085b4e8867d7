package registry

import (
	"context"
	"errors"
)

// Store is one registry a process has opened: the Discovery its clients
// follow, the Registrar its servers announce themselves with, and the
// Admin its operators change the registry through, over one connection
// to one backend. Each backend has one Open (registry/etcd's Open,
// registry/zookeeper's Open); the muster command, the console and the xDS
// control plane take a Store and never read a backend's keys themselves.
//
// Every backend's Store also follows the services' settings
// (CanarySource, PolicySource), so that a resolver or a control plane
// given a Store needs nothing else. A Store is safe for concurrent use.
type Store interface {
	// Discovery returns the store's Discovery, the same on every call.
	// It lists services too (ServiceLister). Close closes it.
	Discovery() Discovery
	// Registrar returns the store's Registrar, created at the first call
	// and the same after. Close closes it, which removes every instance
	// it registered.
	Registrar() Registrar
	// Admin returns the store's operator writes and reads, made by who:
	// every write is recorded as made by who.Who from who.Source where
	// the backend records writes. A backend that lacks an optional part
	// (HistoryReader, InstanceRemover) returns an Admin without it.
	Admin(who Actor) Admin
	// Close closes the Registrar (if one was created: its instances are
	// removed), the Discovery, and the connection the store opened. It
	// is idempotent.
	Close() error
}

// Actor says who makes an operator's write, and from where.
type Actor struct {
	// Who names the person or program: a console user, an etcd user.
	// Empty: the backend's default (registry/etcd: the client's etcd user
	// if it logs in with one, else the process's OS user). ValidateWho
	// checks it.
	Who string
	// Source names where the write is made from: SourceCommand,
	// SourceConsole, SourceLibrary, or another name ValidateSource
	// accepts. Empty: SourceLibrary.
	Source string
}

// Validate checks the fields that are set.
func (a Actor) Validate() error {
	if a.Who != "" {
		if err := ValidateWho(a.Who); err != nil {
			return err
		}
	}
	if a.Source != "" {
		return ValidateSource(a.Source)
	}
	return nil
}

// ErrNoInstance is matched by an Admin's error for an instance that is
// not registered. Each backend's own (registry/etcd's ErrNoInstance)
// wraps it behind the backend's name, so its text is the backend's.
var ErrNoInstance = errors.New("no such instance")

// Admin is what an operator reads and changes in a registry: the
// overrides of instances (drain, weight), the canary and the call policy
// of services. Every backend implements all three parts; the optional
// ones (HistoryReader, InstanceRemover) are found by a type assertion.
//
// Writes are recorded as made by the Actor the Admin was returned for
// (Store.Admin). Methods are safe for concurrent use; each waits for the
// backend at most until ctx ends or the store's request timeout passes.
type Admin interface {
	OverrideAdmin
	CanaryAdmin
	PolicyAdmin
}

// OverrideAdmin changes how clients see registered instances.
type OverrideAdmin interface {
	// Overrides returns the overrides of service's instances, by
	// instance ID; an empty map when there are none.
	Overrides(ctx context.Context, service string) (map[string]Override, error)
	// SetOverride sets the override of one registered instance (weight
	// 0 drains it). It fails with an error matching ErrNoInstance if the
	// instance is not registered. The override leaves with the instance.
	SetOverride(ctx context.Context, service, id string, o Override) error
	// ClearOverride removes the override of one instance: clients see
	// the instance as registered. Clearing none is not an error.
	ClearOverride(ctx context.Context, service, id string) error
}

// CanaryAdmin reads and changes the canary setting of services.
type CanaryAdmin interface {
	// Canary returns service's canary, and false when it has none.
	Canary(ctx context.Context, service string) (Canary, bool, error)
	// SetCanary sets service's canary.
	SetCanary(ctx context.Context, service string, c Canary) error
	// ClearCanary removes service's canary. Clearing none is not an
	// error.
	ClearCanary(ctx context.Context, service string) error
}

// PolicyAdmin reads and changes the call policy of services.
type PolicyAdmin interface {
	// Policy returns service's policy, with who set it and when where
	// the backend records them, and false when it has none.
	Policy(ctx context.Context, service string) (PolicyInfo, bool, error)
	// SetPolicy sets service's policy, recording the Admin's Actor as
	// who set it where the backend records that.
	SetPolicy(ctx context.Context, service string, p Policy) error
	// ClearPolicy removes service's policy. Clearing none is not an
	// error.
	ClearPolicy(ctx context.Context, service string) error
}

// HistoryReader is implemented by an Admin whose backend keeps a journal
// of operator writes (registry/etcd; not registry/zookeeper).
type HistoryReader interface {
	// History returns the journal of service's operator writes, or of
	// every service's when service is "", newest first: at most limit
	// records (0: all the journal keeps).
	History(ctx context.Context, service string, limit int) ([]Record, error)
}

// InstanceRemover is implemented by an Admin that can delete an
// instance another process registered (registry/etcd; not
// registry/zookeeper, whose instances are its registrars' ephemeral
// nodes).
type InstanceRemover interface {
	// RemoveInstance deletes one instance and its override, whatever
	// holds them. A live registrar writes its instance again: drain it
	// (SetOverride with weight 0) to take it out of traffic. Removing an
	// instance that is not registered is not an error.
	RemoveInstance(ctx context.Context, service, id string) error
}
