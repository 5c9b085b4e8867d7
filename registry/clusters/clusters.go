package clusters

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

var (
	_ registry.Discovery     = (*Discovery)(nil)
	_ registry.ServiceLister = (*Discovery)(nil)
)

// MaxNameLen is the longest cluster name, in bytes.
const MaxNameLen = 64

// Cluster is one independent registry cluster of a Discovery.
type Cluster struct {
	// Name names the cluster (a region or a data centre, such as
	// "eu-1"): the registry.ClusterKey metadata of its instances. It is
	// required, unique within a Discovery, at most MaxNameLen bytes of
	// letters, digits, '.', '_' and '-'.
	Name string
	// Region is set as the Region of the cluster's instances that set
	// none. Optional; printable ASCII of at most registry.MaxRegionLen
	// bytes.
	Region string
	// Discovery follows the cluster: normally an etcd.Discovery on a
	// client of its own. Required.
	Discovery registry.Discovery
}

// Discovery serves the union of several clusters' instances (see the
// package documentation).
type Discovery struct {
	clusters []Cluster // sorted by name
	services *watchhub.Services[*follower]
}

// New returns a Discovery over clusters. No cluster, a cluster without a
// Discovery, an empty, invalid or repeated name, or an invalid region is
// an error naming the cluster. New does not contact the clusters.
func New(clusters ...Cluster) (*Discovery, error) {
	if len(clusters) == 0 {
		return nil, errors.New("clusters: New: no cluster given")
	}
	seen := make(map[string]bool, len(clusters))
	var errs []error
	for i, c := range clusters {
		if err := ValidateName(c.Name); err != nil {
			errs = append(errs, fmt.Errorf("clusters: New: cluster %d: %w", i, err))
			continue
		}
		if seen[c.Name] {
			errs = append(errs, fmt.Errorf("clusters: New: cluster name %q used twice", c.Name))
		}
		seen[c.Name] = true
		if c.Discovery == nil {
			errs = append(errs, fmt.Errorf("clusters: New: cluster %q: nil Discovery", c.Name))
		}
		if err := ValidateRegion(c.Region); err != nil {
			errs = append(errs, fmt.Errorf("clusters: New: cluster %q: %w", c.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sorted := slices.Clone(clusters)
	slices.SortFunc(sorted, func(a, b Cluster) int { return strings.Compare(a.Name, b.Name) })
	d := &Discovery{clusters: sorted}
	d.services = watchhub.NewServices((*follower).stop, 0)
	return d, nil
}

// ValidateName returns an error saying what is wrong with a cluster name,
// nil if it is valid (see Cluster.Name).
func ValidateName(name string) error {
	if name == "" {
		return errors.New("empty cluster name")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("cluster name %.16q... is longer than %d bytes", name, MaxNameLen)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return fmt.Errorf("cluster name %q: %q is not a letter, digit, '.', '_' or '-'", name, r)
		}
	}
	return nil
}

// ValidateRegion returns an error saying what is wrong with a cluster's
// region, nil if it is valid (see Cluster.Region).
func ValidateRegion(region string) error {
	if len(region) > registry.MaxRegionLen {
		return fmt.Errorf("region is longer than %d bytes", registry.MaxRegionLen)
	}
	for i := 0; i < len(region); i++ {
		if region[i] <= ' ' || region[i] > '~' {
			return fmt.Errorf("region %q: byte %d is not printable ASCII", region, i)
		}
	}
	return nil
}

// Clusters returns the names of d's clusters, sorted.
func (d *Discovery) Clusters() []string {
	names := make([]string, len(d.clusters))
	for i, c := range d.clusters {
		names[i] = c.Name
	}
	return names
}

// Watch follows service in every cluster and returns at once; see
// registry.Discovery. Its snapshots are the union of the clusters',
// with each cluster's part in Snapshot.Clusters.
func (d *Discovery) Watch(ctx context.Context, service string) (registry.Watcher, error) {
	if err := registry.ValidateName(service); err != nil {
		return nil, err
	}
	return d.services.Watch(ctx, service, service, func(h *watchhub.Hub) *follower {
		return startFollower(d.clusters, service, h, time.Now())
	})
}

// Services returns the services of the clusters whose Discovery is a
// registry.ServiceLister, sorted and without duplicates, asking the
// clusters at once. A cluster that does not answer before ctx ends is
// left out; the error is non-nil only when no cluster answered, and then
// names each cluster's error.
func (d *Discovery) Services(ctx context.Context) ([]string, error) {
	type answer struct {
		names []string
		err   error
	}
	answers := make([]answer, len(d.clusters))
	var wg sync.WaitGroup
	for i, c := range d.clusters {
		l, ok := c.Discovery.(registry.ServiceLister)
		if !ok {
			answers[i].err = fmt.Errorf("cluster %s: its Discovery cannot list services", c.Name)
			continue
		}
		wg.Go(func() {
			names, err := l.Services(ctx)
			if err != nil {
				err = fmt.Errorf("cluster %s: %w", c.Name, err)
			}
			answers[i] = answer{names, err}
		})
	}
	wg.Wait()
	var names []string
	var errs []error
	answered := false
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		answered = true
		names = append(names, a.names...)
	}
	if !answered {
		return nil, fmt.Errorf("clusters: list services: %w", errors.Join(errs...))
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// DiscoveryStats reports the union's own services and watchers, with the
// skipped values, loads and resyncs of every cluster's Discovery that
// reports them (registry.StatsReporter), summed; so metrics.Discovery can
// collect the union as it collects one cluster.
func (d *Discovery) DiscoveryStats() registry.DiscoveryStats {
	st := d.services.Stats()
	for _, c := range d.clusters {
		if r, ok := c.Discovery.(registry.StatsReporter); ok {
			cs := r.DiscoveryStats()
			st.SkippedValues += cs.SkippedValues
			st.Loads += cs.Loads
			st.Resyncs += cs.Resyncs
		}
	}
	return st
}

// Close stops every watch d started and closes its watchers. It is
// idempotent; the clusters' Discoveries stay open.
func (d *Discovery) Close() error {
	d.services.Close()
	return nil
}
