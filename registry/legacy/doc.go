// Package legacy lets services move to Muster one at a time from go-zero,
// Kratos and etcd's naming package, on the same etcd.
//
// It reads the layouts those frameworks write (GoZero, Kratos, Naming, each
// an etcd.Layout given to etcd.NewDiscovery with etcd.WithLayout, so that
// the shared watch, cache, staleness and skipping of bad values are those
// of Muster's own Discovery), merges them with Muster's own registry into
// one Discovery (Merged: the union by address, Muster's entry winning), and
// writes a Muster instance in their layouts too (the same types, given to
// etcd.WithMirror), so that clients still on the old framework find a
// migrated server.
//
// Nothing here imports go-zero or Kratos: their layouts are keys and JSON
// values. docs/MIGRATION.md is the step-by-step guide.
//
// # Staleness and loading
//
// A Merged snapshot is Loaded once every part is loaded, or at least one is
// and the others are stale (a source that cannot be read does not hold back
// the others); it is stale while any part is. Its Revision is the highest
// of the parts' and its Generation the sum of theirs, so it changes
// whenever one part's history is replaced. An unchanged instance keeps its
// pointer from one merged snapshot to the next, so the resolver reuses its
// endpoint.
//
// The layouts are pure values, safe for concurrent use; a Merged Discovery
// is safe for concurrent use.
package legacy
