// Package etcd is Muster's etcd backend: a Registrar that keeps instances
// registered under one lease for as long as the process lives, and a
// Discovery that follows services through one shared, cached watch each.
//
// # Keys and values
//
// An instance is stored at <prefix>/<service>/<id> (prefix
// registry.DefaultPrefix unless WithPrefix says otherwise) with the JSON
// value of registry.Marshal. Every key is bound to the registrar's lease in
// the same request that writes it.
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
// removing every instance at once.
//
// The registrar owns its keys. It watches the deletions in each service it
// has instances in and writes a deleted key again as soon as the event
// arrives, and every audit interval (WithAuditInterval, default 5s) it
// checks that etcd still holds every key under its lease and that etcd's
// history did not go back below its last write (a restore from a backup),
// writing again what is missing, or everything after a rewind. To take a
// live instance out of traffic, drain it (SetOverride): a deleted key comes
// back.
//
// # Discovery
//
// A Discovery loads a service with one linearizable Get at revision R and
// follows it with one Watch from R (WithRequireLeader, progress
// notifications), applying each watch response to its cache and publishing
// one sorted snapshot per response. Every watcher of the service in the
// process shares that watch. After a watch error, a compaction, a
// cancellation or a silence (no event nor progress notification for three
// progress intervals), it reads the service again, publishes the difference
// and watches again, with backoff. While etcd is unreachable the cache keeps
// the last known instances; the snapshot says since when it is stale. A
// value that fails to decode or validate is skipped, logged once and
// counted (Stats); the rest of the service is served.
//
// # Client
//
// Both take a *clientv3.Client owned by the caller. ClientConfig returns a
// configuration that reconnects quickly after an outage and detects dead
// connections; use it, or set the same fields on your own.
//
// All types are safe for concurrent use.
package etcd
