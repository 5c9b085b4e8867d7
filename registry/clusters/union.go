package clusters

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"time"

	"github.com/musterhq/muster/registry"
)

// union merges the clusters' snapshots of one service into one. It is
// pure (it reads no clock: the follower's start is given) and not safe for
// concurrent use.
type union struct {
	service string
	started time.Time // when following began: a cluster not loaded yet is stale since then
	parts   []part    // one per cluster, sorted by name
}

// part is one cluster's side of a union: its name and region, and its
// instances tagged, kept while the cluster's instance is the same
// pointer, so an unchanged instance keeps its pointer from one union to
// the next.
type part struct {
	name, region string
	src          []*registry.Instance // the cluster's list last tagged
	tagged       []*registry.Instance // src's copies, in src's order
}

func newUnion(service string, clusters []Cluster, started time.Time) *union {
	u := &union{service: service, started: started, parts: make([]part, len(clusters))}
	for i, c := range clusters {
		u.parts[i] = part{name: c.Name, region: c.Region}
	}
	return u
}

// merge returns the union of snaps, the clusters' snapshots in the order
// of u's parts (see the package documentation for each field).
func (u *union) merge(snaps []registry.Snapshot) registry.Snapshot {
	out := registry.Snapshot{Service: u.service, Clusters: make([]registry.ClusterSnapshot, len(snaps))}
	gen := fnv.New64a()
	var errs []error
	for i, s := range snaps {
		p := &u.parts[i]
		p.retag(s.Instances)
		out.Clusters[i] = registry.ClusterSnapshot{
			Cluster: p.name, Instances: p.tagged, Loaded: s.Loaded, StaleSince: s.StaleSince, Err: s.Err,
		}
		out.Loaded = out.Loaded || s.Loaded
		out.Revision += s.Revision
		fmt.Fprintf(gen, "%d,", s.Generation)
		since := s.StaleSince
		if since.IsZero() && !s.Loaded {
			since = u.started
		}
		if !since.IsZero() && (out.StaleSince.IsZero() || since.Before(out.StaleSince)) {
			out.StaleSince = since
		}
		if s.Err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", p.name, s.Err))
		}
		if s.Retired != nil {
			out.Retired = append(out.Retired, s.Retired...) // a new array: parts' slices stay theirs
			if out.Retired == nil {
				out.Retired = []string{} // a part records departures: none yet
			}
		}
	}
	if n := len(out.Retired); n > registry.MaxRetired {
		out.Retired = out.Retired[n-registry.MaxRetired:]
	}
	if out.Loaded {
		out.Generation = gen.Sum64() | 1 // never 0 once loaded
	}
	out.Err = errors.Join(errs...)
	lists := make([][]*registry.Instance, len(u.parts))
	for i := range u.parts {
		lists[i] = u.parts[i].tagged
	}
	out.Instances = registry.MergeSorted(lists...)
	return out
}

// retag makes p's tagged list the copies of list's instances, reusing the
// copy of every instance that is the same pointer as before.
func (p *part) retag(list []*registry.Instance) {
	if samePointers(p.src, list) {
		return
	}
	prev := make(map[*registry.Instance]*registry.Instance, len(p.src))
	for i, in := range p.src {
		prev[in] = p.tagged[i]
	}
	tagged := make([]*registry.Instance, len(list))
	for i, in := range list {
		if c, ok := prev[in]; ok {
			tagged[i] = c
			continue
		}
		tagged[i] = tag(in, p.name, p.region)
	}
	p.src, p.tagged = list, tagged
}

// tag returns a copy of in carrying cluster in its ClusterKey metadata
// and region as its Region if it has none; in is shared and not changed.
func tag(in *registry.Instance, cluster, region string) *registry.Instance {
	c := *in
	c.Metadata = make(map[string]string, len(in.Metadata)+1)
	maps.Copy(c.Metadata, in.Metadata)
	c.Metadata[registry.ClusterKey] = cluster
	if c.Region == "" {
		c.Region = region
	}
	return &c
}

func samePointers(a, b []*registry.Instance) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// sameUnion reports whether a reader would see no difference between two
// unions: the same instances (pointers) and the same state of each part.
func sameUnion(a, b registry.Snapshot) bool {
	if a.Loaded != b.Loaded || !a.StaleSince.Equal(b.StaleSince) || a.Revision != b.Revision ||
		a.Generation != b.Generation || !samePointers(a.Instances, b.Instances) || len(a.Clusters) != len(b.Clusters) {
		return false
	}
	for i, p := range a.Clusters {
		q := b.Clusters[i]
		if p.Loaded != q.Loaded || !p.StaleSince.Equal(q.StaleSince) || errText(p.Err) != errText(q.Err) {
			return false
		}
	}
	return true
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
