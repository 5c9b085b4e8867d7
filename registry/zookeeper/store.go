package zookeeper

import (
	"context"

	"github.com/musterhq/muster/internal/storekit"
	"github.com/musterhq/muster/registry"
)

// Store is the registry in one ZooKeeper ensemble (registry.Store): a
// Discovery, a Registrar created when first asked for, and the operator's
// Admin. The Discovery and the Registrar each hold a session; each Admin
// write opens a connection of its own for its length.
//
// ZooKeeper's Admin keeps no journal of operator writes
// (registry.HistoryReader) and cannot remove an instance another process
// registered (registry.InstanceRemover): its instances are their
// registrars' ephemeral nodes. A policy records no setter.
type Store struct {
	storekit.Base // the Discovery, the Registrar, the settings' followers
	servers       []string
	opts          []Option
	d             *Discovery
}

var (
	_ registry.Store        = (*Store)(nil)
	_ registry.CanarySource = (*Store)(nil)
	_ registry.PolicySource = (*Store)(nil)
)

// Open returns the registry in the ZooKeeper ensemble of servers
// (host:port each). It connects in the background, as NewDiscovery does.
// Every option applies to the parts it concerns; an invalid one is an
// error.
func Open(servers []string, opts ...Option) (*Store, error) {
	d, err := NewDiscovery(servers, opts...)
	if err != nil {
		return nil, err
	}
	// Neither fails: d is not nil.
	canaries, _ := NewCanaries(d)
	policies, _ := NewPolicies(d)
	s := &Store{servers: servers, opts: opts, d: d}
	s.D = d
	s.NewRegistrar = func() registry.Registrar {
		r, err := NewRegistrar(servers, opts...)
		if err != nil {
			// The Discovery dialled the same servers with the same
			// options: a Registrar that cannot start says why at once.
			return failed{err}
		}
		return r
	}
	s.Canaries.Follow, s.Policies.Follow = canaries.WatchCanary, policies.WatchPolicy
	return s, nil
}

// Admin returns the operator's reads and writes. ZooKeeper records no
// writer: who is only checked (an Actor that Validate refuses makes
// every call fail with its error).
func (s *Store) Admin(who registry.Actor) registry.Admin {
	return &admin{s: s, err: who.Validate()}
}

// Close closes the Registrar, if one was created (its instances leave
// at once: its session ends), then the Discovery. It is idempotent.
func (s *Store) Close() error { return s.Base.Close() }

// failed is a Registrar that could not start: every call returns why.
type failed struct{ err error }

func (f failed) Register(context.Context, registry.Instance) error { return f.err }
func (f failed) Deregister(context.Context, string, string) error  { return f.err }
func (f failed) Close() error                                      { return nil }

// admin is Store.Admin's registry.Admin: the package's functions with the
// store's servers and options.
type admin struct {
	s   *Store
	err error // the Actor's, returned by every call
}

var _ registry.Admin = (*admin)(nil)

func (a *admin) Overrides(ctx context.Context, service string) (map[string]registry.Override, error) {
	if a.err != nil {
		return nil, a.err
	}
	return a.s.d.Overrides(ctx, service)
}

// Registered returns the value instance id of service was registered
// with, without its override, as Discovery.Registered does.
func (a *admin) Registered(ctx context.Context, service, id string) (registry.Instance, error) {
	if a.err != nil {
		return registry.Instance{}, a.err
	}
	return a.s.d.Registered(ctx, service, id)
}

func (a *admin) SetOverride(ctx context.Context, service, id string, o registry.Override) error {
	if a.err != nil {
		return a.err
	}
	return SetOverride(ctx, a.s.servers, service, id, o, a.s.opts...)
}

func (a *admin) ClearOverride(ctx context.Context, service, id string) error {
	if a.err != nil {
		return a.err
	}
	return ClearOverride(ctx, a.s.servers, service, id, a.s.opts...)
}

func (a *admin) Canary(ctx context.Context, service string) (registry.Canary, bool, error) {
	if a.err != nil {
		return registry.Canary{}, false, a.err
	}
	return GetCanary(ctx, a.s.servers, service, a.s.opts...)
}

func (a *admin) SetCanary(ctx context.Context, service string, c registry.Canary) error {
	if a.err != nil {
		return a.err
	}
	return SetCanary(ctx, a.s.servers, service, c, a.s.opts...)
}

func (a *admin) ClearCanary(ctx context.Context, service string) error {
	if a.err != nil {
		return a.err
	}
	return ClearCanary(ctx, a.s.servers, service, a.s.opts...)
}

func (a *admin) Policy(ctx context.Context, service string) (registry.PolicyInfo, bool, error) {
	if a.err != nil {
		return registry.PolicyInfo{}, false, a.err
	}
	p, ok, err := GetPolicy(ctx, a.s.servers, service, a.s.opts...)
	return registry.PolicyInfo{Policy: p}, ok, err
}

func (a *admin) SetPolicy(ctx context.Context, service string, p registry.Policy) error {
	if a.err != nil {
		return a.err
	}
	return SetPolicy(ctx, a.s.servers, service, p, a.s.opts...)
}

func (a *admin) ClearPolicy(ctx context.Context, service string) error {
	if a.err != nil {
		return a.err
	}
	return ClearPolicy(ctx, a.s.servers, service, a.s.opts...)
}
