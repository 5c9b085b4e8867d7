package registry

import "time"

// ClusterKey is the metadata key in which a Discovery over several
// independent registry clusters (package registry/clusters) names the
// cluster each instance was found in. It is reserved: that Discovery sets
// it on every instance it serves, replacing any value registered. Being
// metadata, it reaches everything that reads an instance (balancers, the
// resolver's meta.muster.cluster= filter, JSON output, the console)
// without a field of its own.
const ClusterKey = "muster.cluster"

// ClusterOf returns the cluster in was found in: its ClusterKey metadata,
// or "" for an instance of a single-cluster Discovery.
func ClusterOf(in *Instance) string { return in.Metadata[ClusterKey] }

// ClusterSnapshot is one cluster's part of a Snapshot served by a
// Discovery over several independent clusters: each cluster is loaded,
// stale or fresh on its own.
type ClusterSnapshot struct {
	// Cluster is the cluster's name, the ClusterKey of its instances.
	Cluster string
	// Instances is the cluster's instances, sorted by ID: the same
	// pointers as in the Snapshot's Instances, shared and read-only.
	Instances []*Instance
	// Loaded is true once the cluster's list was read at least once.
	Loaded bool
	// StaleSince is zero while the cluster is followed; otherwise it is
	// when that stopped (its instances are the last known).
	StaleSince time.Time
	// Err is the last error that made the cluster's part stale.
	Err error
}

// Stale reports whether the cluster's part may be behind its cluster.
func (c ClusterSnapshot) Stale() bool { return !c.StaleSince.IsZero() }

// MergeSorted returns the instances of lists (each sorted by ID) in one
// list sorted by ID, an ID found in several lists ordered as the lists
// are: the Instances of a Snapshot whose Clusters' parts are lists, in
// cluster order. The result is a new slice.
func MergeSorted(lists ...[]*Instance) []*Instance {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make([]*Instance, 0, n)
	next := make([]int, len(lists))
	for len(out) < n {
		best := -1
		for i, l := range lists {
			if next[i] < len(l) && (best < 0 || l[next[i]].ID < lists[best][next[best]].ID) {
				best = i
			}
		}
		out = append(out, lists[best][next[best]])
		next[best]++
	}
	return out
}
