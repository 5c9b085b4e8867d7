// Package kubernetes is a read-only Muster Discovery over Kubernetes
// EndpointSlices, so that a gRPC client resolves a Kubernetes service with
// Muster's resolver and balancers: "muster:///name.namespace" (or
// "muster:///name" in the namespace of WithNamespace, "default" unless
// set). Kubernetes names have no dots, so the split is unambiguous.
//
// It is its own Go module so that the main module's users never download
// client-go.
//
// For each followed service, one informer lists and watches the slices
// labelled kubernetes.io/service-name=<name> in its namespace, shared by
// every watcher of the service. Every change rebuilds the list from all
// the service's slices in the informer's store, so a service spread over
// many slices is aggregated (a change to one slice never replaces the
// others), a deleted slice removes only its endpoints, and a burst of
// events makes one snapshot. The first snapshot is Loaded once the
// informer has listed the slices.
//
// Endpoints map to instances as follows (docs/KUBERNETES.md has the table):
//   - conditions: ready (nil means true) takes calls with the default
//     weight; not ready, serving and terminating drains (Draining, weight
//     0: no new calls); anything else is left out;
//   - Addr: the endpoint's first address with the slice's port chosen by
//     WithPort (default: the slice's only port);
//   - ID: the targetRef's name (the pod), or the address when there is
//     none, or when one pod has several addresses (dual stack);
//   - Zone: the endpoint's zone; Version: the slice's label chosen by
//     WithVersionLabel (default none); Metadata: MetaNamespace, MetaPod,
//     MetaNode; Weight: the default (Kubernetes has no weights);
//   - an address in several slices (a slice being replaced) is listed
//     once, ready preferred over draining;
//   - an endpoint that maps to no valid instance is skipped, logged and
//     counted (Stats.SkippedEndpoints); the others are served.
//
// While list or watch requests fail, the snapshot keeps the last known
// instances and is stale (StaleSince, Err) until a request succeeds; the
// informer retries with client-go's backoff. Revision counts the changes
// of the list this Discovery has published (Kubernetes resource versions
// are opaque and are not compared); Generation is 1.
//
// A Discovery is safe for concurrent use; Close stops every informer and
// waits for its goroutines.
package kubernetes
