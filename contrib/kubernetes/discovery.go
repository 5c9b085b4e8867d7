package kubernetes

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

var _ registry.Discovery = (*Discovery)(nil)

// Discovery follows Kubernetes services through their EndpointSlices. It
// is read-only: instances come and go as Kubernetes manages the pods.
//
// Each followed service has one informer (a list and watch of the slices
// labelled kubernetes.io/service-name=<name> in its namespace) and one
// goroutine, shared by every watcher of the service; they stop when its
// last watcher closes. A Discovery is safe for concurrent use.
type Discovery struct {
	client kubernetes.Interface
	opts   options
	log    *slog.Logger

	mu       sync.Mutex
	services map[string]*service // by "name.namespace"
	closed   bool

	skipped    atomic.Uint64
	listErrors atomic.Uint64
}

// Stats are a Discovery's counters.
type Stats struct {
	// Services is the number of services followed now.
	Services int
	// Watchers is the number of open watchers.
	Watchers int
	// SkippedEndpoints counts endpoints left out because they could not
	// be mapped to an instance (no port of the chosen name, several ports
	// and no WithPort, an address or ID Muster does not accept). Each
	// version of a slice is counted (and logged) once.
	SkippedEndpoints uint64
	// ListWatchErrors counts the list and watch requests to the API server
	// that failed; each makes the service's snapshot stale until a request
	// succeeds.
	ListWatchErrors uint64
}

// NewDiscovery returns a Discovery reading EndpointSlices through client
// (a clientset for a cluster, or client-go's fake clientset in tests). It
// does not contact the API server until the first Watch. client stays
// owned by the caller.
func NewDiscovery(client kubernetes.Interface, opts ...Option) (*Discovery, error) {
	if client == nil {
		return nil, errors.New("kubernetes: NewDiscovery: nil client")
	}
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	return &Discovery{
		client:   client,
		opts:     o,
		log:      o.logger.With("component", "muster.kubernetes"),
		services: map[string]*service{},
	}, nil
}

// Watch starts following the Kubernetes service named by service,
// "name.namespace" or "name" (in the namespace of WithNamespace), and
// returns at once; see registry.Discovery. The first snapshot is Loaded
// once the service's informer has listed its slices. A name that is not
// a Kubernetes service name (with an optional namespace) is an error
// matching registry.ErrInvalidInstance.
func (d *Discovery) Watch(ctx context.Context, service string) (registry.Watcher, error) {
	ref, err := parseService(service, d.opts.namespace)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, registry.ErrClosed
	}
	s := d.services[ref.key()]
	if s == nil {
		s = d.startService(ref)
		d.services[ref.key()] = s
	}
	w := s.hub.Watch(ctx, service)
	d.mu.Unlock()
	return w, nil
}

// Stats returns the Discovery's counters.
func (d *Discovery) Stats() Stats {
	d.mu.Lock()
	st := Stats{Services: len(d.services)}
	for _, s := range d.services {
		st.Watchers += s.hub.Watchers()
	}
	d.mu.Unlock()
	st.SkippedEndpoints = d.skipped.Load()
	st.ListWatchErrors = d.listErrors.Load()
	return st
}

// Close stops every informer, waits for their goroutines, and closes every
// watcher. It is idempotent.
func (d *Discovery) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	services := d.services
	d.services = map[string]*service{}
	d.mu.Unlock()
	for _, s := range services {
		s.hub.CloseAll()
		s.stop()
	}
	return nil
}

// startService starts the informer and goroutine of ref. d.mu must be
// held.
func (d *Discovery) startService(ref serviceRef) *service {
	ctx, cancel := context.WithCancel(context.Background())
	s := &service{
		d:   d,
		ref: ref,
		m: mapping{
			service:      ref.key(),
			namespace:    ref.namespace,
			port:         d.opts.port,
			versionLabel: d.opts.versionLabel,
		},
		log:    d.log.With("service", ref.key()),
		cancel: cancel,
		done:   make(chan struct{}),
		dirty:  make(chan struct{}, 1),
		logged: map[string]string{},
	}
	s.hub = watchhub.New(ref.key(), func() { d.release(s) })
	go s.run(ctx)
	return s
}

// release stops s when its last watcher closed and none was added since.
func (d *Discovery) release(s *service) {
	d.mu.Lock()
	last := s.hub.Watchers() == 0 && d.services[s.ref.key()] == s
	if last {
		delete(d.services, s.ref.key())
	}
	d.mu.Unlock()
	if last {
		s.stop()
	}
}
