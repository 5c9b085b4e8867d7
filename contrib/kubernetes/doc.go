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
// Each ready endpoint is an instance that takes calls with the default
// weight (Kubernetes has no weights); one not ready but still serving
// while it terminates is Draining; any other is left out. The ID is the
// pod's name (the address without one), the Addr the endpoint's first
// address with the port WithPort names, and an endpoint that maps to no
// valid instance is skipped, logged and counted (Stats.SkippedEndpoints)
// while the others are served. docs/KUBERNETES.md has the whole mapping.
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
