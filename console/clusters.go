package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/clusters"
	"github.com/musterhq/muster/registry/etcd"
)

// Cluster is one registry of a console over several (NewClusters): an
// etcd cluster, a ZooKeeper ensemble.
type Cluster struct {
	// Name names the cluster (a region or a data centre), as
	// clusters.Cluster.Name: required, unique, letters, digits, '.', '_'
	// and '-'.
	Name string
	// Region is set as the Region of the cluster's instances that set
	// none. Optional.
	Region string
	// Store is the cluster's registry (etcd.NewStore, zookeeper.Open).
	// Required; it stays owned by the caller and must outlive the Server.
	Store registry.Store
}

// part is one registry the console reads and writes: the only one of a
// console made by New (named ""), or one of NewClusters'.
type part struct {
	name, region string
	store        registry.Store
	// d is the store's Discovery, which lists services.
	d lister
	// canaries and policies follow the services' canary settings and
	// call policies for their pages.
	canaries registry.CanarySource
	policies registry.PolicySource
	// policyInfos follows the policies with who set them and when; nil
	// when the store records no setter.
	policyInfos policyInfoSource
	// read is the store's Admin for what the console reads (overrides,
	// the journal); writes are made by each session's own.
	read registry.Admin
	// journal reads the history of operator writes; nil when the store
	// keeps none.
	journal registry.HistoryReader
	// leases reads when instances' leases run out; nil when the store's
	// instances have no leases.
	leases etcd.LeaseReader
	// overrideReads shares the reads of the overrides of one state of a
	// service among its pages.
	overrideReads sharedReads[map[string]bool]
}

// policyInfoSource follows a service's policy with who set it and when
// (the etcd Store's WatchPolicyInfo).
type policyInfoSource interface {
	WatchPolicyInfo(ctx context.Context, service string) <-chan registry.PolicyInfo
}

// newPart reads the registry of store. Its Discovery must list services
// (registry.ServiceLister) and the store must follow canaries and
// policies (registry.CanarySource, registry.PolicySource), as every
// backend's Store does.
func newPart(name, region string, store registry.Store) (*part, error) {
	if store == nil {
		return nil, errors.New("nil store")
	}
	p := &part{name: name, region: region, store: store, read: store.Admin(registry.Actor{Source: registry.SourceConsole})}
	var ok bool
	if p.d, ok = store.Discovery().(lister); !ok {
		return nil, fmt.Errorf("the store's Discovery (%T) does not list services (registry.ServiceLister)", store.Discovery())
	}
	if p.canaries, ok = store.(registry.CanarySource); !ok {
		return nil, fmt.Errorf("the store (%T) does not follow canaries (registry.CanarySource)", store)
	}
	if p.policies, ok = store.(registry.PolicySource); !ok {
		return nil, fmt.Errorf("the store (%T) does not follow policies (registry.PolicySource)", store)
	}
	p.policyInfos, _ = store.(policyInfoSource)
	p.journal, _ = p.read.(registry.HistoryReader)
	p.leases, _ = store.(etcd.LeaseReader)
	return p, nil
}

// NewClusters returns a console over several independent registries (etcd
// clusters, ZooKeeper ensembles: any mix of Stores), read as clients'
// clusters.Discovery reads them: the pages show the union of the
// clusters' instances, each with its cluster (a Cluster column and
// filter; an ID found in two clusters is two instances), the health of
// each cluster (fresh, stale since when, unreachable) on the services page,
// and each cluster's canary setting and call policy on a service's page.
// Actions and policy edits write to the cluster of the instance or the one
// the operator chose, and only there. Each cluster keeps its own watch and
// staleness: one that does not answer leaves its instances shown as last
// read, and the others' changes are shown as they come.
//
// No cluster, a cluster without a store, an empty, invalid or repeated
// name, or an invalid region is an error naming the cluster, as is
// WithLegacy (legacy sources are read beside one cluster only). Like New,
// it reads no registry until a page asks, and closes no store.
func NewClusters(cs []Cluster, opts ...Option) (*Server, error) {
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	if len(o.legacy) > 0 {
		return nil, errors.New("console: NewClusters: WithLegacy reads legacy sources beside one cluster; use New")
	}
	members := make([]clusters.Cluster, 0, len(cs))
	for i, c := range cs {
		if c.Store == nil {
			return nil, fmt.Errorf("console: NewClusters: cluster %d (%q): nil store", i, c.Name)
		}
		// Placeholders, to check the names and regions before anything
		// is started.
		members = append(members, clusters.Cluster{Name: c.Name, Region: c.Region, Discovery: noDiscovery{}})
	}
	if _, err := clusters.New(members...); err != nil {
		return nil, fmt.Errorf("console: NewClusters: %w", err)
	}
	// The parts in name order, as the union orders its clusters.
	cs = slices.Clone(cs)
	slices.SortFunc(cs, func(a, b Cluster) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(members, func(a, b clusters.Cluster) int { return strings.Compare(a.Name, b.Name) })
	parts := make([]*part, 0, len(cs))
	for i, c := range cs {
		p, err := newPart(c.Name, c.Region, c.Store)
		if err != nil {
			return nil, fmt.Errorf("console: cluster %s: %w", c.Name, err)
		}
		parts = append(parts, p)
		members[i].Discovery = p.d
	}
	u, err := clusters.New(members...)
	if err != nil {
		return nil, fmt.Errorf("console: NewClusters: %w", err)
	}
	return newServer(parts, u, []func() error{u.Close}, o), nil
}

// noDiscovery stands for a cluster's Discovery while NewClusters checks
// the clusters' names; it is never asked anything.
type noDiscovery struct{ registry.Discovery }

// several reports whether the console reads several clusters
// (NewClusters).
func (s *Server) several() bool { return s.parts[0].name != "" }

// listedInSome reports whether some cluster lists service, asking every
// cluster at once and answering with the first that lists it, so that a
// cluster that does not answer (each listing waits up to the request
// timeout) holds back no page of a service another cluster lists. It is
// false when every cluster answered without it. When none of those that
// answered lists it and some did not answer, whether it exists is unknown:
// the error names each cluster that did not answer (a noAnswer when none
// answered).
func (s *Server) listedInSome(ctx context.Context, service string) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the listings still running end with it
	type answer struct {
		part  string
		names []string
		err   error
	}
	answers := make(chan answer, len(s.parts))
	for _, p := range s.parts {
		go func() {
			ctx, cancel := s.request(ctx)
			defer cancel()
			names, err := p.d.Services(ctx)
			answers <- answer{p.name, names, err}
		}()
	}
	var errs []error
	for range s.parts {
		a := <-answers
		if a.err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", a.part, a.err))
			continue
		}
		if _, ok := slices.BinarySearch(a.names, service); ok {
			return true, nil
		}
	}
	if len(errs) > 0 {
		err := fmt.Errorf("whether service %s exists is unknown: %w", service, errors.Join(errs...))
		if len(errs) == len(s.parts) {
			return false, noAnswer{err}
		}
		return false, err
	}
	return false, nil
}

// partNamed returns the cluster a request names: the only one of a
// console made by New, where name must be empty, or the one of that name.
func (s *Server) partNamed(name string) (*part, error) {
	if !s.several() {
		if name != "" {
			return nil, fmt.Errorf("cluster %q: this console reads one cluster; give none", name)
		}
		return s.parts[0], nil
	}
	if name == "" {
		return nil, errors.New("this console reads several clusters: name one (cluster)")
	}
	for _, p := range s.parts {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no cluster %q", name)
}

// instanceKey keys an instance within the console: its ID, prefixed by
// its cluster and "/" when the console reads several (IDs have no '/').
func instanceKey(cluster, id string) string {
	if cluster == "" {
		return id
	}
	return cluster + "/" + id
}
