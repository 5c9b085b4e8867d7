package zookeeper

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/registry"
)

var (
	_ registry.Discovery     = (*Discovery)(nil)
	_ registry.ServiceLister = (*Discovery)(nil)
)

// Discovery follows services in ZooKeeper over one connection: one
// goroutine and one set of watches per service (a children watch and a
// data watch on the service's node, a data watch on each instance node),
// shared by every watcher of the service. While ZooKeeper is unreachable
// the last known instances are kept and the snapshot is marked stale; after
// a reconnection (or a new session) each service is read again and the
// difference published.
type Discovery struct {
	o    options
	log  *slog.Logger
	conn *conn

	mu       sync.Mutex
	services map[string]*service
	closed   bool

	skipped       atomic.Uint64
	loads         atomic.Uint64
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
		services: map[string]*service{},
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
	d.mu.Lock()
	defer d.mu.Unlock()
	if ev.Type == zk.EventSession || ev.Type == zk.EventNotWatching {
		for _, s := range d.services {
			s.sessionEvent(ev)
		}
		return
	}
	// The service's node, or an instance node below it.
	name := strings.TrimPrefix(ev.Path, d.o.root+"/")
	if name == ev.Path {
		return
	}
	name, id, _ := strings.Cut(name, "/")
	if s := d.services[name]; s != nil {
		s.nodeEvent(ev, id)
	}
}

// Watch starts following service and returns at once.
func (d *Discovery) Watch(ctx context.Context, name string) (registry.Watcher, error) {
	if err := registry.ValidateName(name); err != nil {
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
	s := d.services[name]
	if s == nil {
		s = newService(d, name)
		d.services[name] = s
		go s.run()
	}
	w := s.hub.Watch(ctx, name)
	d.mu.Unlock()
	return w, nil
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
	d.mu.Lock()
	st := Stats{Services: len(d.services)}
	for _, s := range d.services {
		st.Watchers += s.hub.Watchers()
	}
	d.mu.Unlock()
	st.SkippedValues = d.skipped.Load()
	st.Loads = d.loads.Load()
	st.WatchRequests = d.watchRequests.Load()
	return st
}

// Close stops every service and closes every watcher and the connection.
// It is idempotent.
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
		s.stop()
		s.hub.CloseAll()
	}
	d.conn.close()
	return nil
}

// release is called when a watcher's Close left s with none; unless a
// watcher was added since, it stops s.
func (d *Discovery) release(s *service) {
	d.mu.Lock()
	if s.hub.Watchers() > 0 || d.services[s.name] != s {
		d.mu.Unlock()
		return
	}
	delete(d.services, s.name)
	d.mu.Unlock()
	s.stop()
}
