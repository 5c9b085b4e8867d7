// Package etcd is Muster's etcd backend: a Registrar that keeps instances
// registered under one lease for as long as the process lives, and a
// Discovery that follows services through one shared, cached watch each.
//
// # Keys and values
//
// An instance is stored at <prefix>/<service>/<id> (prefix
// registry.DefaultPrefix unless WithPrefix says otherwise) with the JSON
// value of registry.Marshal. Every key is bound to the registrar's lease in
// the same request that writes it. The operators' settings live beside
// the instances: an override at <prefix>/<service>/<id>/override, the
// canary at <prefix>.canary/<service>, the call policy at
// <prefix>.policy/<service>, and the journal of their writes at
// <prefix>.history/<service>/ (see Operator writes).
//
// # Registration
//
// A Registrar grants one lease when its first instance is registered and
// keeps it alive: it renews it every TTL/3 and gives each renewal TTL/6 to
// be answered; a member that does not answer in time (frozen, or behind a
// partition that keeps its connections open) is left for another member
// at once, so while a quorum is reachable the lease is renewed at the
// latest TTL/2 after its last renewal. When the lease is lost anyway
// (revoked, expired during an outage or a partition longer than the TTL),
// it grants a new one and rewrites every instance under the same keys,
// retrying with capped exponential backoff and jitter until Close. It works
// while etcd is unreachable: Register then returns an error matching
// registry.ErrPending (at once while its last attempt failed) and the
// instance appears as soon as etcd answers. Close revokes the lease,
// removing every instance at once. Many instances are written in one
// transaction (up to WithMaxTxnOps operations, default 128), on first
// registration and after a lost lease alike; a transaction etcd refuses
// for what it holds is split, so an instance etcd refuses holds back no
// other.
//
// One goroutine, the registrar's run loop, makes every write, one
// transaction at a time (at most 1 MiB of keys and values), so a Register
// and a Deregister never interleave into a stale key; a key is deleted only
// while it is still bound to the registrar's lease, and an instance
// written serving is first written Draining, in the transaction before the
// deletion's. A Discovery records an instance deleted while Draining as a
// deliberate departure (registry.Snapshot's Retired): clients
// (package resolver) release it at once, and hold any other deletion of a
// serving instance for a grace, since etcd revokes live leases after a
// paused leader resumes. Close's revocation drains nothing: its instances
// are held for the grace (their connections fail once the process ends). After a lost lease the
// loop writes every key again under the new lease, moves the operators'
// overrides still bound to the old lease onto it, and only then revokes the
// old lease, which removes the keys deregistered meanwhile.
// Register and Deregister hand their call to the run loop, which alone
// holds the set of instances, and wait for its answer: sent when the
// call's own key is written or deleted, when etcd refuses the instance,
// after an attempt etcd did not answer, or at Close. Thousands of
// concurrent calls cost one wake-up each; Status reads the state the loop
// published last.
//
// The registrar owns its keys. It watches the deletions in each service it
// has instances in and writes a deleted key again as soon as the event
// arrives; that watch is kept honest as a Discovery's (below: progress
// requests, the silence limit, hedged recovery off a silent member). Every
// audit interval (WithAuditInterval, default 5s), after each new watch of
// its keys, and when that watch shows etcd below its last write, it checks
// that etcd still holds every key under its lease and that etcd's history
// did not go back below its last write (a restore from a backup), writing
// again what is missing, or everything after a rewind. The followers of a
// service's canary and call policy (Canaries, Policies) use the same watch. To take a
// live instance out of traffic, drain it (SetOverride): a deleted key comes
// back.
//
// While it fails, the registrar logs a warning per attempt with how long
// it has been failing (failing_for) and when it tries next
// (next_attempt_in); when every instance is written again it logs, once
// per outage, "registered again after an outage" with the outage's length
// (counted from the first failed attempt, or from a TTL before the loss of
// a lease that expired unrenewed).
//
// # Discovery
//
// A Discovery loads a service with one linearizable Get at revision R and
// follows it with one Watch from R (WithRequireLeader, progress
// notifications), applying each watch response to its cache, with the
// responses already queued behind it, and publishing one sorted snapshot of
// them (so a Discovery behind a trickle of changes, such as a mass expiry,
// catches up in batches). Every watcher of the service in the
// process shares that watch. After a watch error, a compaction, a
// cancellation or a silence (no event nor progress notification for 2.5
// progress intervals, 5s by default), it reads the service again,
// publishes the difference and watches again, with backoff. While etcd is
// unreachable the cache keeps the last known instances; the snapshot says
// since when it is stale; each failed attempt is logged with stale_for and
// next_attempt_in, and the first fresh list after it, once, as "watch
// resumed; list current again" with stale_for. A value that fails to
// decode or validate, or that names another service or ID than its key,
// is skipped, logged once and counted (Stats); the rest of the service is
// served. Every Get and watch creation is bounded by the request timeout
// (a lost watch creation would otherwise wait forever).
//
// A frozen or partitioned member keeps its connections up, so the etcd
// client keeps placing requests on it. After a silence, the reload and the
// new watch are therefore hedged: a Get or a watch creation not answered
// within an eighth of the progress interval is started again (a watch on a
// new gRPC stream), which the client places on another member, and a new
// watch created by the member that went silent is given up for another.
// With the default options (progress interval 2s, request timeout 5s), a
// change made through the other members reaches the snapshot within 10s of
// the member carrying the watch freezing (figures in docs/RELIABILITY.md).
//
// Revisions can go backwards: etcd restored from a backup, restarted with
// an empty data directory, or another cluster on the same endpoints. A
// response (Get or watch) with a revision lower than one already seen for
// the service, or another cluster ID, starts a new history: the service is
// reloaded, published under a new snapshot Generation (1 after the first
// load), the once-per-mod-revision record of bad values is forgotten, and
// the rewind is logged once (warning) and counted (Stats.Rewinds). A
// restore followed by enough writes to pass the old revision before the
// Discovery reads again, in a cluster with the same ID, cannot be told
// from progress: the snapshot is still a fresh load, under the old
// Generation.
//
// A key written without a lease, by hand or by another tool, is served as a
// static instance: nothing expires it, and it leaves when it is deleted
// (Delete). Registrars never write such keys.
//
// # Operator writes
//
// SetOverride, ClearOverride, Delete, SetCanary, ClearCanary, SetPolicy and
// ClearPolicy are traced: each writes a registry.Record of itself (when,
// who, from where, what, the stored value before and after) to the
// service's journal in the same transaction as the change, guarded by the
// modification revisions of everything it read, so a change never lands
// without its record nor a record without its change, and a concurrent
// write makes it read again (at most 32 attempts, then ErrContended). The
// journal is a ring of WithJournalSize slots per service (default 100)
// under registry.JournalKey, bound to no lease; History reads it, newest
// first. WithBy and WithSource name who and from where (by default the
// client's etcd user, else the OS user, from "library"); a policy set
// WithBy also records them, as "alice (console)". A write made with
// another etcd client directly leaves no record.
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
// # Client
//
// Both take a *clientv3.Client owned by the caller. ClientConfig returns a
// configuration that reconnects quickly after an outage and detects dead
// connections; use it, or set the same fields on your own.
//
// All types are safe for concurrent use.
package etcd
