// Package clusters is a Discovery over several independent registry
// clusters, each named (a region or a data centre): a client reads them
// all, with no server of its own and no replication between them.
//
// New takes the clusters, each with a Discovery of its own (normally an
// etcd.Discovery with its own etcd client), and serves, for each service,
// the union of the clusters' instances:
//
//   - Every instance carries its cluster's name in its registry.ClusterKey
//     metadata ("muster.cluster"), and the cluster's Region when it set
//     none, so that the locality levels (registry.Near) apply across
//     clusters: a client in region eu calls the eu cluster's instances
//     first.
//   - An instance ID found in two clusters stays two instances: an
//     instance's key is its cluster, service and ID. The union is sorted
//     by ID, then by cluster name.
//   - Each cluster keeps its own client, watch, cache and staleness: the
//     snapshot's Clusters field holds each cluster's part (its instances,
//     Loaded, StaleSince, Err). A cluster that is down or partitioned
//     keeps its last instances, marked stale in its part, while the
//     others stay fresh; the union is Stale while any part is (or while a
//     cluster has not answered yet), since StaleSince the earliest.
//   - The union is Loaded as soon as one cluster is: a cluster unreachable
//     at start never holds back the others; its instances join when it
//     answers.
//   - The snapshot carries what the resolver needs to treat each cluster
//     on its own: its empty-list protection judges each cluster's part
//     (one cluster's mass expiry is withheld while the others' changes
//     pass), and the union's Retired holds the deliberate departures of
//     every cluster, by ID (docs/CLUSTERS.md has the table of what works
//     how across clusters).
//
// Registrars write to their own cluster only (a Registrar on that
// cluster's client); so do operators' settings (drain, weight, canary,
// policy): they are per cluster. Nothing is copied between clusters.
//
// A Discovery follows each service with one goroutine shared by all its
// watchers (internal/watchhub), which merges the clusters' snapshots
// after any change of one of them. It does not own its clusters'
// Discoveries: Close stops its own watches, not theirs. It is safe for
// concurrent use.
package clusters
