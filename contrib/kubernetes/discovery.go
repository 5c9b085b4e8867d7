package kubernetes

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

var (
	_ registry.Discovery     = (*Discovery)(nil)
	_ registry.StatsReporter = (*Discovery)(nil)
)

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

	services *watchhub.Services[*service] // by "name.namespace"

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
		services: watchhub.NewServices((*service).stop, 0),
	}, nil
}

// Watch starts following the Kubernetes service named by target,
// "name.namespace" or "name" (in the namespace of WithNamespace), and
// returns at once; see registry.Discovery. The first snapshot is Loaded
// once the service's informer has listed its slices. A name that is not
// a Kubernetes service name (with an optional namespace) is an error
// matching registry.ErrInvalidInstance.
func (d *Discovery) Watch(ctx context.Context, target string) (registry.Watcher, error) {
	ref, err := parseService(target, d.opts.namespace)
	if err != nil {
		return nil, err
	}
	return d.services.Watch(ctx, ref.key(), target, func(hub *watchhub.Hub) *service {
		return d.startService(ref, hub)
	})
}

// Stats returns the Discovery's counters.
func (d *Discovery) Stats() Stats {
	var st Stats
	st.Services, st.Watchers = d.services.Counts()
	st.SkippedEndpoints = d.skipped.Load()
	st.ListWatchErrors = d.listErrors.Load()
	return st
}

// DiscoveryStats returns the Discovery's state in the shape every
// backend reports (registry.StatsReporter), for package metrics: services
// by "name.namespace", SkippedValues the skipped endpoints, no Loads or
// Resyncs (the informers list and re-list on their own; Stats counts
// their failed requests).
func (d *Discovery) DiscoveryStats() registry.DiscoveryStats {
	st := d.services.Stats()
	st.SkippedValues = d.skipped.Load()
	return st
}

// Close stops every informer, waits for their goroutines, and closes every
// watcher. It is idempotent.
func (d *Discovery) Close() error {
	d.services.Close()
	return nil
}

// startService starts the informer and goroutine of ref, which publish to
// hub. It is called under the lock of d.services.
func (d *Discovery) startService(ref serviceRef, hub *watchhub.Hub) *service {
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
		hub:    hub,
	}
	go s.run(ctx)
	return s
}
