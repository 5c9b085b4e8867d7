// Package registry defines Muster's backend-neutral service registry model:
// the Instance a server announces, its validation and JSON value codec, and
// the Registrar and Discovery interfaces that every backend implements.
//
// A process opens a backend once, as a Store (registry/etcd's Open,
// registry/zookeeper's Open): its Discovery, its Registrar and the Admin
// through which operators drain, weigh and set canaries and policies.
// Everything that reads or changes a registry (the muster command, the
// console, the xDS control plane) takes a Store, so that backends differ
// in storage and in the optional Admin parts they declare (HistoryReader,
// InstanceRemover), not in what callers write.
//
// A backend (such as package registry/etcd) stores one value per instance
// under the key <prefix>/<service>/<instance-id>. The value is the JSON
// produced by Marshal, carrying a schema version ("v":1) so that readers can
// refuse values written by a future, incompatible format.
//
// # Concurrency
//
// Instance and Snapshot are plain values. A Snapshot's Instances slice, and
// the instances it points to, are shared between every watcher of a service
// and must be treated as read-only; an instance that did not change is the
// same pointer in consecutive snapshots. Store, Admin, Registrar, Discovery
// and Watcher implementations are safe for concurrent use.
package registry
