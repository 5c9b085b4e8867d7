package resolver

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/registry"
)

var _ grpcresolver.Builder = (*Builder)(nil)

// Errors returned by this package.
var (
	// ErrBadTarget is matched by the error Build returns for a target it
	// cannot resolve; the message names the problem.
	ErrBadTarget = errors.New("resolver: bad target")
	// ErrSchemeRegistered is returned by Register when gRPC's global
	// registry already has a resolver for the scheme.
	ErrSchemeRegistered = errors.New("resolver: scheme already registered")
)

// Builder resolves "muster:///<service>" targets through a
// registry.Discovery. Pass it to each channel with grpc.WithResolvers, or
// register it globally with Register. A Builder is safe for concurrent use
// and may serve any number of channels; all channels of a service share the
// Discovery's one watch.
type Builder struct {
	d    registry.Discovery
	opts options
	log  *slog.Logger
	// p makes what every channel of the Builder is served: one watcher
	// and feed per target, one follower of the settings per service.
	p *served.Pipeline

	// defaultNotice logs once that channels get DefaultBalancer
	// (decideDefault).
	defaultNotice sync.Once
}

// Stats are a Builder's counters.
type Stats struct {
	// Updates counts states pushed to channels.
	Updates uint64
	// Protected counts updates withheld by empty-list protection.
	Protected uint64
	// Held counts instances held for the deletion grace
	// (WithDeletionGrace) after they left the registry while serving.
	Held uint64
}

// New returns a Builder over d, or an error naming every invalid option
// (and a nil d). d stays owned by the caller and must outlive every
// channel built with it.
func New(d registry.Discovery, opts ...Option) (*Builder, error) {
	b := newBuilder(d, opts)
	if d == nil {
		b.opts.err = errors.Join(errors.New("resolver: New: nil Discovery"), b.opts.err)
	}
	if b.opts.err != nil {
		return nil, b.opts.err
	}
	return b, nil
}

// NewBuilder returns a Builder over d, for use where a constructor cannot
// return an error (inline in grpc.WithResolvers). d stays owned by the
// caller and must outlive every channel built with it. Given an invalid
// option it logs the error and returns a Builder whose every Build fails
// with it, naming the option: the channel reports it, and its calls fail
// with codes.Unavailable and that message. New reports it at once.
func NewBuilder(d registry.Discovery, opts ...Option) *Builder {
	b := newBuilder(d, opts)
	if b.opts.err != nil {
		b.log.Error("invalid options: every channel of this Builder fails", "error", b.opts.err)
	}
	return b
}

func newBuilder(d registry.Discovery, opts []Option) *Builder {
	o := buildOptions(opts)
	b := &Builder{d: d, opts: o, log: o.logger.With("component", "muster.resolver")}
	cfg := o.served
	cfg.Logger, cfg.Build = b.log, buildEndpoints
	b.p = served.New(d, cfg)
	return b
}

// Scheme returns the scheme the Builder resolves.
func (b *Builder) Scheme() string { return b.opts.scheme }

// Stats returns the Builder's counters.
func (b *Builder) Stats() Stats {
	s := b.p.Stats()
	return Stats{Updates: s.Updates, Protected: s.Protected, Held: s.Held}
}

// Build starts resolving target for cc. It never blocks on the registry:
// the first state is delivered at once from the Discovery's cache or the
// disk snapshot when either has the service, and otherwise when the first
// load completes, or as a resolver error when that load fails or takes
// longer than the first-state timeout; with WithCanaries or WithPolicies,
// once the service's settings are read too, within the same timeout. gRPC
// calls Build for a channel; a program that wants the states a channel
// would get (after protection and the target's filters) may call it with a
// ClientConn of its own: UpdateState and ReportError are then called one
// at a time, from the resolver's goroutines (the target's and the
// channel's own), and count in Stats; they should
// return promptly, since the other channels of the target wait meanwhile.
// Such a ClientConn gets the channel's service config (see Balancing in
// the package documentation) when its ParseServiceConfig accepts it; pass
// BuildOptions.DisableServiceConfig for none.
func (b *Builder) Build(target grpcresolver.Target, cc grpcresolver.ClientConn, bo grpcresolver.BuildOptions) (grpcresolver.Resolver, error) {
	if b.opts.err != nil {
		return nil, b.opts.err
	}
	q, err := parseTarget(target.URL)
	if err != nil {
		return nil, err
	}
	if q.Zone == "" {
		q.Zone = b.opts.zone
	}
	if q.Region == "" {
		q.Region = b.opts.region
	}
	lb, byDefault := b.channelBalancer(q.lb, bo)
	r := &musterResolver{
		b:         b,
		cc:        cc,
		q:         q,
		log:       b.log.With("service", q.Service),
		lbConfig:  lb,
		byDefault: byDefault,
	}
	f, err := b.p.Follow(q.Target, r)
	if err != nil {
		return nil, fmt.Errorf("resolver: %w", err)
	}
	r.f = f
	return r, nil
}

// Register adds b to gRPC's global resolver registry, so that channels
// created without grpc.WithResolvers resolve its scheme. It refuses, with
// ErrSchemeRegistered, to replace a resolver already registered for the
// scheme (gRPC's own resolver.Register would silently override it). Like
// gRPC's, it must be called at initialization time, before channels are
// created, and not concurrently with other registrations.
func Register(b grpcresolver.Builder) error {
	if grpcresolver.Get(b.Scheme()) != nil {
		return fmt.Errorf("%w: %q; use grpc.WithResolvers, or another scheme (WithScheme)", ErrSchemeRegistered, b.Scheme())
	}
	grpcresolver.Register(b)
	return nil
}
