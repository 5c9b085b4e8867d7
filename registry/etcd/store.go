package etcd

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/settingfeed"
	"github.com/musterhq/muster/internal/storekit"
	"github.com/musterhq/muster/registry"
)

// Store is the registry in one etcd cluster (registry.Store): a Discovery,
// a Registrar created when first asked for, and the operator's Admin, over
// one client. Open connects it, NewStore puts it over a client of the
// caller's.
type Store struct {
	storekit.Base // the Discovery, the Registrar, the settings' followers
	cli           *clientv3.Client
	own           bool          // Close closes cli (Open)
	opts          []StoreOption // given to Open, each passed to the parts it concerns
	o             options
	policyInfos   settingfeed.Shared[registry.PolicyInfo] // with who set them, for views (WatchPolicyInfo)
}

var (
	_ registry.Store        = (*Store)(nil)
	_ registry.CanarySource = (*Store)(nil)
	_ registry.PolicySource = (*Store)(nil)
)

// Open connects to the etcd cluster cfg names (etcd.ClientConfig gives
// Muster's defaults: Open(ClientConfig("127.0.0.1:2379"))) and returns
// the registry in it. It does not wait for etcd: the client connects in
// the background, as clientv3.New does. The Store owns the client: its
// Close closes it. It takes every option of the package and passes each
// to the parts it concerns: a RegistrarOption to the Registrar (WithTTL),
// a DiscoveryOption to the Discovery (WithLinger), a WatchOption to both
// and to the settings' followers (WithProgressInterval), a WriteOption to
// the Admin's writes (WithJournalSize), an Option to every part. An
// invalid one is an error.
func Open(cfg clientv3.Config, opts ...StoreOption) (*Store, error) {
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: open: %w", err)
	}
	s, err := newStore(cli, true, opts)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	return s, nil
}

// NewStore returns the registry in the etcd cluster cli reaches. cli
// stays the caller's: Close does not close it, and it must outlive the
// Store. Options as for Open.
func NewStore(cli *clientv3.Client, opts ...StoreOption) (*Store, error) {
	if cli == nil {
		return nil, errors.New("etcd: NewStore: nil client")
	}
	return newStore(cli, false, opts)
}

func newStore(cli *clientv3.Client, own bool, opts []StoreOption) (*Store, error) {
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	d, err := NewDiscovery(cli, only[DiscoveryOption](opts)...)
	if err != nil {
		return nil, err
	}
	// Neither fails: the client is not nil and the options are valid.
	canaries, _ := NewCanaries(cli, only[WatchOption](opts)...)
	policies, _ := NewPolicies(cli, only[WatchOption](opts)...)
	s := &Store{cli: cli, own: own, opts: opts, o: o}
	s.D = d
	s.NewRegistrar = func() registry.Registrar {
		r, _ := NewRegistrar(cli, only[RegistrarOption](opts)...) // the options and the client were checked
		return r
	}
	s.Canaries.Follow, s.Policies.Follow = canaries.WatchCanary, policies.WatchPolicy
	s.policyInfos.Follow = policies.WatchPolicyInfo
	return s, nil
}

// Client returns the etcd client the store reads and writes through, for
// what only etcd has (leases, members, alarms).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Admin returns the operator's reads and writes, each write recorded in
// the service's journal as made by who (WithBy and WithSource for the
// package's functions), and a policy as set by "who (source)". The Admin
// also reads the journal (registry.HistoryReader) and removes instances
// (registry.InstanceRemover). An Actor that Validate refuses makes every
// write fail with its error.
func (s *Store) Admin(who registry.Actor) registry.Admin {
	a := &admin{s: s, err: who.Validate()}
	if a.err != nil {
		return a
	}
	if who.Source == "" {
		who.Source = registry.SourceLibrary
	}
	by := who.Who
	if by == "" {
		by = defaultWho(s.cli)
	}
	a.opts = only[Option](s.opts)
	a.writeOpts = append(only[WriteOption](s.opts), WithBy(by), WithSource(who.Source))
	return a
}

// only returns the options of opts that a part taking O reads: how a Store
// passes each option to the parts it concerns.
func only[O StoreOption](opts []StoreOption) []O {
	var out []O
	for _, opt := range opts {
		if o, ok := opt.(O); ok {
			out = append(out, o)
		}
	}
	return out
}

// Close closes the Registrar, if one was created (its instances leave
// etcd at once: its lease is revoked), then the Discovery, then the
// client if Open made it. It is idempotent.
func (s *Store) Close() error {
	if s.own {
		return s.Base.Close(s.cli.Close)
	}
	return s.Base.Close()
}

// admin is Store.Admin's registry.Admin: the package's functions with the
// store's client and options and the Actor's name.
type admin struct {
	s         *Store
	opts      []Option      // the store's options of its reads
	writeOpts []WriteOption // the store's options of its writes, WithBy and WithSource the Actor
	err       error         // the Actor's, returned by every call
}

var (
	_ registry.Admin           = (*admin)(nil)
	_ registry.HistoryReader   = (*admin)(nil)
	_ registry.InstanceRemover = (*admin)(nil)
)

func (a *admin) Overrides(ctx context.Context, service string) (map[string]registry.Override, error) {
	return a.OverridesAt(ctx, service, 0)
}

func (a *admin) SetOverride(ctx context.Context, service, id string, o registry.Override) error {
	if a.err != nil {
		return a.err
	}
	return SetOverride(ctx, a.s.cli, service, id, o, a.writeOpts...)
}

func (a *admin) ClearOverride(ctx context.Context, service, id string) error {
	if a.err != nil {
		return a.err
	}
	return ClearOverride(ctx, a.s.cli, service, id, a.writeOpts...)
}

func (a *admin) Canary(ctx context.Context, service string) (registry.Canary, bool, error) {
	if a.err != nil {
		return registry.Canary{}, false, a.err
	}
	op, key, err := canaryKey(a.opts, service)
	if err != nil {
		return registry.Canary{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, op.requestTimeout)
	defer cancel()
	resp, err := a.s.cli.Get(ctx, key)
	if err != nil {
		return registry.Canary{}, false, fmt.Errorf("etcd: read canary %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return registry.Canary{}, false, nil
	}
	c, err := registry.UnmarshalCanary(resp.Kvs[0].Value)
	if err != nil {
		return registry.Canary{}, false, fmt.Errorf("etcd: canary %s: %w", key, err)
	}
	return c, true, nil
}

func (a *admin) SetCanary(ctx context.Context, service string, c registry.Canary) error {
	if a.err != nil {
		return a.err
	}
	return SetCanary(ctx, a.s.cli, service, c, a.writeOpts...)
}

func (a *admin) ClearCanary(ctx context.Context, service string) error {
	if a.err != nil {
		return a.err
	}
	return ClearCanary(ctx, a.s.cli, service, a.writeOpts...)
}

func (a *admin) Policy(ctx context.Context, service string) (registry.PolicyInfo, bool, error) {
	if a.err != nil {
		return registry.PolicyInfo{}, false, a.err
	}
	return GetPolicyInfo(ctx, a.s.cli, service, a.opts...)
}

func (a *admin) SetPolicy(ctx context.Context, service string, p registry.Policy) error {
	if a.err != nil {
		return a.err
	}
	return SetPolicy(ctx, a.s.cli, service, p, a.writeOpts...)
}

func (a *admin) ClearPolicy(ctx context.Context, service string) error {
	if a.err != nil {
		return a.err
	}
	return ClearPolicy(ctx, a.s.cli, service, a.writeOpts...)
}

func (a *admin) History(ctx context.Context, service string, limit int) ([]registry.Record, error) {
	if a.err != nil {
		return nil, a.err
	}
	return History(ctx, a.s.cli, service, limit, a.opts...)
}

func (a *admin) RemoveInstance(ctx context.Context, service, id string) error {
	if a.err != nil {
		return a.err
	}
	return Delete(ctx, a.s.cli, service, id, a.writeOpts...)
}
