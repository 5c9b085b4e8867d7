package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/admission"
	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/internal/xdscheck"
	"github.com/musterhq/muster/registry"
)

// Errors of the Server.
var (
	// ErrClosed is returned by Serve after Close.
	ErrClosed = errors.New("xds: server closed")
	// ErrNoServices is returned by New when no WithServices is given and
	// the Discovery cannot list services (it does not implement
	// registry.ServiceLister).
	ErrNoServices = errors.New("xds: no services to publish: give WithServices or a Discovery that implements registry.ServiceLister")
)

// Server is an xDS control plane over a registry.Discovery: it publishes
// every followed service to xDS clients over state-of-the-world ADS. See the
// package documentation for the resources and their versions.
//
// A Server is safe for concurrent use.
type Server struct {
	opts  options
	p     *served.Pipeline // each service's list: the same as a muster:/// channel's
	c     *caches
	ads   discoveryv3.AggregatedDiscoveryServiceServer // go-control-plane's, each stream's first request on a deadline
	stats *stats
	log   *slog.Logger

	kick   chan struct{}   // a client asked for an unknown service: list now
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	feeds   map[string]*feed
	servers map[*grpc.Server]struct{}
	closed  bool
}

// New returns a Server following d and starts following its services: those
// of WithServices, or every service d lists (see WithListInterval). It does
// not block on the registry; a service is published once its first list is
// known. Close stops it.
func New(d registry.Discovery, opts ...Option) (*Server, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	o.checkSlowStart()
	if o.err != nil {
		return nil, o.err
	}
	lister, canList := d.(registry.ServiceLister)
	if len(o.services) == 0 && !canList {
		return nil, ErrNoServices
	}
	st := newStats(&o)
	creds, err := o.grpcCreds(st)
	if err != nil {
		return nil, err
	}
	if creds != nil {
		o.grpcOpts = append(o.grpcOpts, creds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts:    o,
		p:       served.New(d, o.pipelineConfig()),
		c:       newCaches(strconv.FormatInt(time.Now().UnixNano(), 36)+"-", o.maxZones, o.metadata, o.callPolicies, o.log),
		stats:   st,
		log:     o.log,
		ctx:     ctx,
		cancel:  cancel,
		feeds:   map[string]*feed{},
		servers: map[*grpc.Server]struct{}{},
	}
	if o.selfCheck {
		s.c.check = s.selfCheck
	}
	s.ads = gatedADS{serverv3.NewServer(ctx, s.c, s.stats)}
	if len(o.services) > 0 {
		for _, svc := range o.services {
			if err := s.follow(svc); err != nil {
				_ = s.Close()
				return nil, err
			}
		}
		return s, nil
	}
	s.kick = make(chan struct{}, 1)
	s.c.unknown = func() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	s.wg.Add(1)
	go s.listLoop(lister)
	return s, nil
}

// selfCheck logs and counts every precondition of the xDS clients of
// audience that res breaks (WithSelfCheck).
func (s *Server) selfCheck(res types.Resource, audience xdscheck.Family) {
	for _, v := range xdscheck.CheckFor(res, audience) {
		s.stats.violations.Add(1)
		s.log.Error("xds: a published resource breaks a precondition of xDS clients (a bug in Muster: those clients reject, misread or crash on it)",
			"rule", v.Rule.ID, "type", v.Type, "name", v.Name, "error", v.Error(), "sources", strings.Join(v.Rule.Sources, "; "))
	}
}

// Register registers the ADS service on g, for callers that run their own
// grpc.Server (with their own credentials and listener). It must be called
// before g serves. Close ends the ADS streams but does not stop g. The
// bounds on streams and requests (WithMaxStreams, node IDs, names) hold on
// g too; those of a connection (how many, streams per connection, request
// size: docs/XDS.md, "Limits") are g's options and listener, the caller's
// to set.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.ads)
}

// Serve serves ADS on lis with a grpc.Server of its own (options from
// WithGRPCServerOptions) until ctx ends or Close is called, then stops that
// server at once (ADS streams never end by themselves, so there is nothing
// to wait for) and closes lis. It returns nil when ctx ended, ErrClosed when
// Close stopped it or had been called before, or the error that made
// serving fail. It may be called more than once, with other listeners.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	g := grpc.NewServer(append(limitServerOptions(), s.opts.grpcOpts...)...)
	if s.opts.tls() {
		lis = admission.NewTLSListener(lis, s.stats.handshakes, s.stats.conns, s.log)
	} else {
		lis = admission.NewListener(lis, s.stats.conns, s.log)
	}
	if !s.opts.tls() && !loopback(lis.Addr()) {
		s.log.Warn("xds: serving ADS in plaintext on an address other hosts may reach: any of them can read every "+
			"published service's addresses; serve with TLS (WithTLSFiles, muster xds --xds-cert) and client "+
			"certificates, or listen on loopback", "addr", lis.Addr().String())
	}
	s.Register(g)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = lis.Close()
		return ErrClosed
	}
	s.servers[g] = struct{}{}
	s.mu.Unlock()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-s.ctx.Done():
		case <-stop:
		}
		g.Stop()
	}()
	err := g.Serve(lis)
	close(stop)
	<-done
	s.mu.Lock()
	delete(s.servers, g)
	s.mu.Unlock()
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("xds: serve: %w", err)
	}
	if ctx.Err() == nil && s.ctx.Err() != nil {
		return ErrClosed
	}
	return nil
}

// loopback reports whether addr is a TCP address on a loopback IP.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// Close stops following the registry, ends every ADS stream and stops the
// servers Serve started. It returns nil and is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	feeds := s.feeds
	s.feeds = map[string]*feed{}
	servers := make([]*grpc.Server, 0, len(s.servers))
	for g := range s.servers {
		servers = append(servers, g)
	}
	s.mu.Unlock()
	s.cancel()
	for _, g := range servers {
		g.Stop()
	}
	s.wg.Wait()
	for _, f := range feeds {
		f.f.Close()
	}
	return nil
}

// Services returns the services the Server follows, published or not yet.
func (s *Server) Services() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.feeds))
	for svc := range s.feeds {
		out = append(out, svc)
	}
	return sortedStrings(out)
}

// follow starts following service, if it is not followed yet.
func (s *Server) follow(service string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.feeds[service]; ok {
		return nil
	}
	f := &feed{s: s, service: service, policy: s.opts.policyOf(service), slowStart: s.opts.slowStartOf(service), logged: map[skipped]bool{}}
	// The pipeline is the one place that applies empty-list protection,
	// the deletion grace and the settings: following the service through
	// it gives the xDS clients exactly what a muster:/// channel gets.
	fl, err := s.p.Follow(served.Target{Service: service}, f)
	if err != nil {
		return fmt.Errorf("xds: follow %s: %w", service, err)
	}
	f.f = fl
	s.feeds[service] = f
	return nil
}

// listLoop follows every service the Discovery lists, now, every list
// interval, and when a client asks for a service not published (at most
// once per minRelist), and forgets those gone from the registry
// (WithForgetAfter), until Close.
func (s *Server) listLoop(l registry.ServiceLister) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.listInterval)
	defer t.Stop()
	for {
		listed := time.Now()
		ctx, cancel := context.WithTimeout(s.ctx, listTimeout)
		names, err := l.Services(ctx)
		cancel()
		switch {
		case s.ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("xds: cannot list services; following those known", "error", err)
		}
		for _, n := range names {
			if err := s.follow(n); err != nil && !errors.Is(err, ErrClosed) {
				s.log.Warn("xds: cannot follow service", "service", n, "error", err)
			}
		}
		if err == nil {
			s.forgetGone(names, time.Now())
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			if wait := minRelist - time.Since(listed); wait > 0 {
				select {
				case <-s.ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
	}
}

// feed receives one service's lists from the pipeline (it is the
// follower's consumer) and publishes them.
type feed struct {
	s         *Server
	service   string
	policy    LBPolicy
	slowStart slowStart // off for none
	f         *served.Follower

	// Written by the follower, which makes every call, and read by the
	// list loop (forgetGone).
	mu         sync.Mutex
	published  bool
	prepared   map[*registry.Instance]*preparedInstance // the instances of the last list, each read and checked once
	logged     map[skipped]bool                         // bad instances already logged
	emptySince time.Time                                // when an empty list was published; zero while not empty
	gone       bool                                     // forgotten: publishes nothing more
}

var _ served.Consumer = (*feed)(nil)

// Serve publishes the service's instances.
func (f *feed) Serve(l served.List) {
	if err := f.publish(l.Instances, l.Canary, l.Policy); err != nil {
		f.s.log.Error("xds: cannot publish service", "service", f.service, "error", err)
	}
}

// publish publishes instances with the service's settings.
func (f *feed) publish(instances []*registry.Instance, canary registry.Canary, call registry.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return nil
	}
	// The pipeline hands over the same instance (the same pointer) for one
	// that did not change, so each instance is read and checked once, not
	// on every change of its service.
	list := make([]*preparedInstance, 0, len(instances))
	prepared := make(map[*registry.Instance]*preparedInstance, len(instances))
	for _, in := range instances {
		p, ok := f.prepared[in]
		if !ok {
			p = prepare(*in)
		}
		prepared[in] = p
		list = append(list, p)
	}
	f.prepared = prepared
	ok, bad := withoutDuplicates(list)
	now := make(map[skipped]bool, len(bad))
	for _, b := range bad {
		now[b] = true
		if !f.logged[b] {
			f.s.stats.skipped.Add(1)
			f.s.log.Warn("xds: instance cannot be published; publishing the others",
				"service", f.service, "id", b.ID, "addr", b.Addr, "reason", b.Reason)
		}
	}
	f.logged = now
	if err := f.s.c.setService(f.service, f.policy, f.slowStart, ok, canary, call, !f.published); err != nil {
		return err
	}
	f.published = true
	switch {
	case len(list) > 0:
		f.emptySince = time.Time{}
	case f.emptySince.IsZero():
		f.emptySince = time.Now()
	}
	return nil
}

// Fail logs that the service's list is not known yet; nothing is
// published for it until it is.
func (f *feed) Fail(err error) {
	f.s.log.Warn("xds: service not loaded yet", "service", f.service, "error", err)
}
