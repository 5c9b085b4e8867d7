package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd/internal/watchloop"
)

var (
	_ registry.Discovery     = (*Discovery)(nil)
	_ registry.ServiceLister = (*Discovery)(nil)
	_ registry.StatsReporter = (*Discovery)(nil)
)

// Discovery follows services in etcd. For each service it runs one
// goroutine holding one etcd watch and a local cache, shared by every
// watcher of that service; the watch stops when the last watcher closes
// (after the linger time, WithLinger).
//
// A service is loaded with one linearizable Get at revision R and then
// followed by a Watch from R (not R+1: see follow; WithRequireLeader,
// progress notifications), each watch response applied to the cache and
// published as one snapshot.
// After a watch error, cancellation, compaction or silence, the service is
// read again, the difference published and the watch restarted, with
// backoff; after a silence the reload and the new watch are hedged across
// members. A rewind of etcd's history (a revision below one seen, another
// cluster ID) is reloaded under a new snapshot Generation. The package
// documentation states the bounds.
// While etcd is unreachable the cache keeps the last known instances and the
// snapshot says since when it is stale.
//
// A Discovery is safe for concurrent use.
type Discovery struct {
	cli  *clientv3.Client
	opts options
	log  *slog.Logger

	services *watchhub.Services[*service]

	// watchStream selects the gRPC stream of new watches; it moves on
	// after a silence, an unconfirmed watch, or etcd refusing a watch for
	// its stream's token.
	watchStream atomic.Uint64
	// counters count what the services' watch loops do.
	counters       watchloop.Counters
	skipped        atomic.Uint64
	watchResponses atomic.Uint64
	changes        atomic.Uint64
}

// Stats are a Discovery's counters.
type Stats struct {
	// Services is the number of services followed now.
	Services int
	// Watchers is the number of open watchers.
	Watchers int
	// SkippedValues counts values skipped because they were malformed,
	// of an unknown schema version, or did not match their key. Each bad
	// value is counted (and logged) once, however often it is read.
	SkippedValues uint64
	// Loads counts every full read of a service (a Get), the first ones
	// included.
	Loads uint64
	// Resyncs counts full reloads after a watch ended (error,
	// cancellation, compaction, silence or lost connection).
	Resyncs uint64
	// CompactionReloads counts the resyncs after a watch was told its
	// start revision was compacted (it fell behind, typically resumed by
	// the etcd client after a lost connection).
	CompactionReloads uint64
	// SilenceReloads counts the resyncs after a watch went silent: no
	// event nor progress notification for 2.5 progress intervals.
	SilenceReloads uint64
	// Rewinds counts the changes of etcd history detected (a revision
	// lower than one seen, or another cluster ID: etcd restored from a
	// backup, restarted empty, replaced); each starts a new snapshot
	// Generation.
	Rewinds uint64
	// WatchResponses counts the watch responses with events applied
	// (progress notifications, which carry none, are not counted).
	WatchResponses uint64
	// Changes counts the snapshots published with a changed list. The
	// responses already queued when one is applied are applied with it
	// and published once, so a Discovery that falls behind a burst or
	// a trickle of changes (a mass expiry) catches up: Changes is then
	// well below WatchResponses.
	Changes uint64
	// PerService describes each followed service, sorted by name.
	PerService []ServiceStats
}

// ServiceStats describes one followed service: what every backend reports
// of it, and two things of etcd's.
type ServiceStats struct {
	registry.ServiceStats
	// Generation is the snapshot's Generation: 1 after the first load,
	// one more after each change of etcd history detected.
	Generation uint64
	// WatchMember is the ID of the etcd member that sent the last
	// response on the service's watch (etcdctl prints it in hex); 0 while
	// no watch is confirmed.
	WatchMember uint64
}

// NewDiscovery returns a Discovery that uses cli. It does not contact etcd
// until the first Watch. cli stays owned by the caller and must outlive the
// Discovery.
func NewDiscovery(cli *clientv3.Client, opts ...DiscoveryOption) (*Discovery, error) {
	if cli == nil {
		return nil, errors.New("etcd: NewDiscovery: nil client")
	}
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	return &Discovery{
		cli:      cli,
		opts:     o,
		log:      o.logger.With("component", "muster.discovery"),
		services: watchhub.NewServices((*service).stop, o.linger),
	}, nil
}

// Watch starts following service and returns at once; see
// registry.Discovery. The first snapshot is already Loaded when another
// watcher of the same service loaded it.
func (d *Discovery) Watch(ctx context.Context, name string) (registry.Watcher, error) {
	if err := registry.ValidateName(name); err != nil {
		return nil, err
	}
	return d.services.Watch(ctx, name, name, func(hub *watchhub.Hub) *service {
		return d.startService(name, hub)
	})
}

// Services lists the services that have at least one key, sorted. It reads
// keys only. It is an error with WithLayout: a layout maps service names to
// keys, not back.
func (d *Discovery) Services(ctx context.Context) ([]string, error) {
	if d.opts.layout != nil {
		return nil, errors.New("etcd: Services: not supported with WithLayout")
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.requestTimeout)
	defer cancel()
	prefix := registry.ServicePrefix(d.opts.prefix, "")
	prefix = prefix[:len(prefix)-1] // "<prefix>/"
	resp, err := d.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var names []string
	for _, kv := range resp.Kvs {
		name, _, err := registry.ParseKey(d.opts.prefix, string(kv.Key))
		if err != nil || seen[name] {
			continue
		}
		seen[name] = true
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// Stats returns the Discovery's counters.
func (d *Discovery) Stats() Stats {
	var st Stats
	d.services.Each(func(s *service) {
		snap, watchers := s.hub.Snapshot(), s.hub.Watchers()
		st.Watchers += watchers
		st.PerService = append(st.PerService, ServiceStats{
			ServiceStats: registry.ServiceStats{
				Name: s.name, Instances: len(snap.Instances), Watchers: watchers,
				StaleSince: snap.StaleSince, Loaded: snap.Loaded,
			},
			Generation: snap.Generation, WatchMember: s.loop.Member(),
		})
	})
	st.Services = len(st.PerService)
	sort.Slice(st.PerService, func(i, j int) bool { return st.PerService[i].Name < st.PerService[j].Name })
	st.SkippedValues = d.skipped.Load()
	st.Loads = d.counters.Loads.Load()
	st.Resyncs = d.counters.Resyncs.Load()
	st.CompactionReloads = d.counters.CompactionReloads.Load()
	st.SilenceReloads = d.counters.SilenceReloads.Load()
	st.Rewinds = d.counters.Rewinds.Load()
	st.WatchResponses = d.watchResponses.Load()
	st.Changes = d.changes.Load()
	return st
}

// DiscoveryStats returns the Discovery's state in the shape every
// backend reports (registry.StatsReporter); Stats says more.
func (d *Discovery) DiscoveryStats() registry.DiscoveryStats {
	st := d.services.Stats()
	st.SkippedValues, st.Loads, st.Resyncs = d.skipped.Load(), d.counters.Loads.Load(), d.counters.Resyncs.Load()
	return st
}

// Close stops every watch and closes every watcher's Updates channel. It is
// idempotent.
func (d *Discovery) Close() error {
	d.services.Close()
	return nil
}

// startService starts the goroutine following name, which publishes to
// hub. It is called under the lock of d.services.
func (d *Discovery) startService(name string, hub *watchhub.Hub) *service {
	ctx, cancel := context.WithCancel(context.Background())
	c := newCache(d.opts.prefix, name, d.opts.layout)
	s := &service{
		d:      d,
		name:   name,
		prefix: c.service,
		log:    d.serviceLog(name),
		cancel: cancel,
		done:   make(chan struct{}),
		hub:    hub,
		cache:  c,
	}
	s.loop = s.newLoop()
	go s.run(ctx)
	return s
}

// serviceLog returns the logger of service's lines. Read in another
// layout than Muster's (WithLayout), they name it (its String, if it has
// one) and the key prefix read, so that the lines of a merged Discovery's
// parts (registry/legacy) tell which part they are about.
func (d *Discovery) serviceLog(service string) *slog.Logger {
	l := d.opts.layout
	if l == nil {
		return d.log.With("service", service)
	}
	return d.log.With("service", service, "layout", layoutName(l), "prefix", l.Prefix(service))
}

// Locate says where service is looked up: the etcd endpoints and the key
// prefix read (with the layout's name, for another layout than Muster's),
// for messages such as the one calls fail with when a service has no
// instance.
func (d *Discovery) Locate(service string) string {
	eps := strings.Join(d.cli.Endpoints(), ",")
	if l := d.opts.layout; l != nil {
		return fmt.Sprintf("etcd %s, %s layout, keys under %s", eps, layoutName(l), l.Prefix(service))
	}
	return fmt.Sprintf("etcd %s, keys under %s", eps, registry.ServicePrefix(d.opts.prefix, service))
}

// layoutName names l: its String, if it has one.
func layoutName(l Layout) string {
	if s, ok := l.(fmt.Stringer); ok {
		return s.String()
	}
	return "custom"
}
