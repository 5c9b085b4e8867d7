// Package etcd is Muster's etcd backend: a Registrar that keeps instances
// registered under one lease for as long as the process lives, a Discovery
// that follows services through one shared, cached watch each, and the
// operators' writes (overrides, canaries, call policies), each recorded in
// a journal.
//
// Open returns the registry in one etcd cluster as a Store
// (registry.Store: its Discovery, a Registrar made when first asked for,
// an Admin per operator) over a client it makes and closes. NewStore does
// the same over a client of the caller's; NewRegistrar, NewDiscovery,
// NewCanaries and NewPolicies make one part each. A client given to them
// stays the caller's and must outlive what uses it. ClientConfig returns
// a client configuration that reconnects quickly after an outage and
// detects dead connections; use it, or set the same fields on your own.
//
// # Keys and values
//
// An instance is stored at <prefix>/<service>/<id> (prefix
// registry.DefaultPrefix unless WithPrefix says otherwise) with the JSON
// value of registry.Marshal. The operators' settings live beside the
// instances: an override at <prefix>/<service>/<id>/override, the canary
// at <prefix>.canary/<service>, the call policy at <prefix>.policy/<service>,
// and the journal of their writes at <prefix>.history/<service>/.
//
// # Registration
//
// A Registrar grants one lease when its first instance is registered,
// binds every key it writes to that lease in the same request, and keeps
// the lease alive, leaving a member that stops answering long before the
// lease could expire (docs/RELIABILITY.md, "The registrar's lease and
// keys"). When the lease is lost anyway (revoked, or expired during an
// outage longer than the TTL), it grants a new one and writes every
// instance again under the same keys, keeping the operators' overrides,
// retrying with capped exponential backoff and jitter until Close. It
// works while etcd is unreachable: Register then returns an error matching
// registry.ErrPending, at once while the registrar waits to retry, and the
// instance appears as soon as etcd answers. Many instances are written in
// few transactions (WithMaxTxnOps); an instance etcd refuses holds back no
// other.
//
// Deregister writes a serving instance Draining in the transaction before
// the one that deletes its key, so that a Discovery records the departure
// as deliberate (registry.Snapshot's Retired) and clients release the
// instance at once. Clients hold any other deletion of a serving instance
// for a grace (package resolver; why: docs/RELIABILITY.md), Close's
// included: Close revokes the lease, removing every instance at once
// without draining it.
//
// The registrar owns its keys: a key someone else deletes is written again
// as soon as the registrar's watch of its services sees the deletion, and
// one deleted or overwritten at the latest at the next audit of its
// lease's keys (WithAuditInterval), which also writes everything again
// when etcd's history went back below the registrar's last write (a
// restore from a backup). To take a live instance out of traffic, drain
// it (SetOverride).
//
// While it fails, the registrar logs a warning per attempt with how long
// it has been failing (failing_for) and when it tries next
// (next_attempt_in); when every instance is written again it logs, once
// per outage, "registered again after an outage" with the outage's length.
//
// # Discovery
//
// A Discovery loads a service with one linearizable Get and follows it
// with one Watch from the Get's revision, shared by every watcher of the
// service in the process; it applies each watch response, with those
// queued behind it, to its cache and publishes one sorted snapshot. After
// a watch error, a compaction, a cancellation or a silence (no event nor
// progress notification for 2.5 progress intervals, WithProgressInterval),
// it reads the service again, publishes the difference and watches again,
// with backoff, away from a member that went silent. With the default
// options, a change made through the other members reaches the snapshot
// within 10s of the member carrying the watch freezing (docs/RELIABILITY.md
// has the mechanism and the measurements).
//
// While etcd is unreachable the cache keeps the last known instances and
// the snapshot says since when it is stale; each failed attempt is logged
// with stale_for and next_attempt_in, and the first fresh list after it,
// once, as "watch resumed; list current again". A value that fails to
// decode or validate, or that names another service or ID than its key,
// is skipped, logged once and counted (Stats); the rest of the service is
// served.
//
// Revisions can go backwards: etcd restored from a backup, restarted with
// an empty data directory, or another cluster on the same endpoints. A
// revision lower than one already seen for the service, or another cluster
// ID, starts a new history: the service is reloaded and published under a
// new snapshot Generation (1 after the first load), and the rewind is
// logged once and counted (Stats.Rewinds). A restore followed by enough
// writes to pass the old revision before the Discovery reads again, in a
// cluster with the same ID, cannot be told from progress: the snapshot is
// still a fresh load, under the old Generation.
//
// A key written without a lease, by hand or by another tool, is served as
// a static instance: nothing expires it, and it leaves when it is deleted
// (Delete). Registrars never write such keys.
//
// # Operator writes
//
// SetOverride, ClearOverride, Delete, SetCanary, ClearCanary, SetPolicy and
// ClearPolicy (and a Store's Admin, which calls them) write a
// registry.Record of themselves (when, who, from where, what, the stored
// value before and after) to the service's journal in the same transaction
// as the change, so a change never lands without its record nor a record
// without its change; a concurrent write makes them read again, and one
// whose keys keep changing fails with ErrContended. The journal keeps
// WithJournalSize records per service, bound to no lease; History reads
// it, newest first. WithBy and WithSource name who and from where; a
// policy set WithBy also records them, as "alice (console)". A write
// made with another etcd client directly leaves no record.
//
// # Other layouts
//
// WithLayout makes a Discovery read services written by another framework
// on the same etcd (registry/legacy has go-zero's, Kratos's and etcd
// naming's): only where the keys are and how a value becomes an Instance
// change; the watch, cache, staleness, rewinds and skipping of bad values
// are the same. WithMirror makes a Registrar also write each instance in
// such layouts, in the same transaction and under the same lease as its own
// key, so that clients still on the old framework find it.
//
// # Options
//
// Each constructor and function takes the options that mean something to
// it, and no other: an option only another part reads does not compile
// there. An invalid option makes it fail with an error naming the option.
//
//	Open, NewStore                     StoreOption: every option
//	NewRegistrar                       RegistrarOption
//	NewDiscovery                       DiscoveryOption
//	NewCanaries, NewPolicies           WatchOption
//	SetOverride, ClearOverride, Delete,
//	SetCanary, ClearCanary,
//	SetPolicy, ClearPolicy             WriteOption
//	GetPolicy, GetPolicyInfo, History  Option
//
// An Option (WithPrefix, WithRequestTimeout) is each of these; a
// WatchOption (WithBackoff, WithProgressInterval, WithLogger) is a
// RegistrarOption and a DiscoveryOption.
//
// All types are safe for concurrent use.
package etcd
