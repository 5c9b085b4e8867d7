package zookeeper

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

var (
	_ registry.Discovery     = (*Discovery)(nil)
	_ registry.ServiceLister = (*Discovery)(nil)
	_ registry.StatsReporter = (*Discovery)(nil)
)

// Discovery follows services in ZooKeeper over one connection: one
// goroutine (and up to 64 short-lived ones while it reads many nodes at
// once) and one set of watches per service (a children watch and a
// data watch on the service's node, a data watch on each instance node),
// shared by every watcher of the service. While ZooKeeper is unreachable
// the last known instances are kept and the snapshot is marked stale; after
// a reconnection (or a new session) each service is read again and the
// difference published.
type Discovery struct {
	o    options
	log  *slog.Logger
	conn *conn

	services *watchhub.Services[*service]
	closed   chan struct{} // closed by Close: ends the settings' followers

	skipped       atomic.Uint64
	loads         atomic.Uint64
	resyncs       atomic.Uint64 // loads of a service after its first
	watchRequests atomic.Uint64
}

// Stats counts what a Discovery did.
type Stats struct {
	// Services is the number of services followed.
	Services int
	// Watchers is the number of open watchers, all services together.
	Watchers int
	// SkippedValues counts bad instance values skipped (each logged
	// once).
	SkippedValues uint64
	// Loads counts full reads of a service (the first, and one after each
	// reconnection or error).
	Loads uint64
	// WatchRequests counts the requests that set a watch. A watch is
	// asked for only when none is armed on the node (the client library
	// keeps every one until it fires, and sets them all again after a
	// reconnection), so this stays near the number of nodes followed
	// while the session lasts, however often the connection drops.
	WatchRequests uint64
}

// NewDiscovery connects to the ZooKeeper servers (host:port each); it
// does not wait for a session.
func NewDiscovery(servers []string, opts ...Option) (*Discovery, error) {
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	d := &Discovery{
		o:        o,
		log:      o.logger.With("component", "muster.discovery", "backend", "zookeeper"),
		services: watchhub.NewServices((*service).stop, 0),
		closed:   make(chan struct{}),
	}
	c, err := dial(servers, o, d.onEvent)
	if err != nil {
		return nil, err
	}
	d.conn = c
	return d, nil
}

// onEvent routes the library's events to the services; it never blocks.
func (d *Discovery) onEvent(ev zk.Event) {
	if ev.Type == zk.EventSession || ev.Type == zk.EventNotWatching {
		d.services.Each(func(s *service) { s.sessionEvent(ev) })
		return
	}
	// The service's node, or an instance node below it.
	name := strings.TrimPrefix(ev.Path, d.o.root+"/")
	if name == ev.Path {
		return
	}
	name, id, _ := strings.Cut(name, "/")
	if s, ok := d.services.Get(name); ok {
		s.nodeEvent(ev, id)
	}
}

// Watch starts following service and returns at once.
func (d *Discovery) Watch(ctx context.Context, name string) (registry.Watcher, error) {
	if err := registry.ValidateName(name); err != nil {
		return nil, err
	}
	return d.services.Watch(ctx, name, name, func(hub *watchhub.Hub) *service {
		s := newService(d, name, hub)
		go s.run()
		return s
	})
}

// Services returns the names of the services with at least one instance
// node, sorted.
func (d *Discovery) Services(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.o.requestTimeout)
	defer cancel()
	var names []string
	err := call(ctx, func() error {
		all, _, err := d.conn.Children(d.o.root)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, name := range all {
			kids, _, err := d.conn.Children(servicePath(d.o.root, name))
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			if len(kids) > 0 && registry.ValidateName(name) == nil {
				names = append(names, name)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// Stats returns counters and sizes.
func (d *Discovery) Stats() Stats {
	var st Stats
	st.Services, st.Watchers = d.services.Counts()
	st.SkippedValues = d.skipped.Load()
	st.Loads = d.loads.Load()
	st.WatchRequests = d.watchRequests.Load()
	return st
}

// DiscoveryStats returns the Discovery's state in the shape every
// backend reports (registry.StatsReporter), for package metrics.
func (d *Discovery) DiscoveryStats() registry.DiscoveryStats {
	st := d.services.Stats()
	st.SkippedValues, st.Loads, st.Resyncs = d.skipped.Load(), d.loads.Load(), d.resyncs.Load()
	return st
}

// Close stops every service and closes every watcher and the connection.
// It is idempotent.
func (d *Discovery) Close() error {
	if d.services.Close() {
		close(d.closed)
		d.conn.close()
	}
	return nil
}
