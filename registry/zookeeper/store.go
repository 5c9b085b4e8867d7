package zookeeper

import (
	"context"
	"errors"
	"sync"

	"github.com/musterhq/muster/internal/settingfeed"
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
	servers []string
	opts    []Option
	d       *Discovery
	// canaries and policies follow the services' settings through d,
	// one follower per service however many read it.
	canaries settingfeed.Shared[registry.Canary]
	policies settingfeed.Shared[registry.Policy]

	mu     sync.Mutex
	reg    *Registrar // nil until Registrar is called
	closed bool
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
	s.canaries.Follow, s.policies.Follow = canaries.WatchCanary, policies.WatchPolicy
	return s, nil
}

// Discovery returns the store's Discovery. Its Overrides and Registered
// read the ensemble directly.
func (s *Store) Discovery() registry.Discovery { return s.d }

// WatchCanary follows service's canary (registry.CanarySource), as
// Canaries does, over one follower per service for every reader of the
// store.
func (s *Store) WatchCanary(ctx context.Context, service string) <-chan registry.Canary {
	return s.canaries.Watch(ctx, service)
}

// WatchPolicy follows service's policy (registry.PolicySource), as
// Policies does, over one follower per service for every reader of the
// store.
func (s *Store) WatchPolicy(ctx context.Context, service string) <-chan registry.Policy {
	return s.policies.Watch(ctx, service)
}

// Registrar returns the store's Registrar, created at the first call. A
// Registrar asked for after Close is closed: its Register returns
// registry.ErrClosed.
func (s *Store) Registrar() registry.Registrar {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reg == nil {
		// Open checked the servers and the options: NewRegistrar cannot
		// fail.
		s.reg, _ = NewRegistrar(s.servers, s.opts...)
		if s.closed {
			_ = s.reg.Close()
		}
	}
	return s.reg
}

// Admin returns the operator's reads and writes. ZooKeeper records no
// writer: who is only checked (an Actor that Validate refuses makes
// every call fail with its error).
func (s *Store) Admin(who registry.Actor) registry.Admin {
	return &admin{s: s, err: who.Validate()}
}

// Close closes the Registrar, if one was created (its instances leave
// at once: its session ends), then the Discovery. It is idempotent and
// returns the first error.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	reg := s.reg
	s.mu.Unlock()
	var errs []error
	if reg != nil {
		errs = append(errs, reg.Close())
	}
	errs = append(errs, s.d.Close())
	return errors.Join(errs...)
}

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
