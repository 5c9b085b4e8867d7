// Package zookeeper is a Muster registry backend on ZooKeeper (3.5 or
// later), with the same logical layout as the etcd backend:
//
//	<root>/<service>       persistent node; its value holds the operators' overrides
//	<root>/<service>/<id>  ephemeral node of the registrar's session; value registry.Marshal(instance)
//
// The root defaults to registry.DefaultPrefix ("/muster/services"). Open
// returns the registry in one ensemble as a Store (registry.Store); its
// Admin lacks what the etcd backend's has beyond registry.Admin (see
// Store), and docs/ZOOKEEPER.md lists every difference.
//
// A Registrar's ZooKeeper session plays the part of the etcd lease: every
// instance node is ephemeral and belongs to it, Close ends the session (all
// nodes go at once), and a process that dies leaves its nodes for the
// session timeout (default 10s). When the session expires while the process
// lives (a partition longer than the timeout), the client library opens a
// new session and the registrar writes every instance again under it,
// retrying with backoff until Close; a node still held by the old session
// is deleted and written again, so there is exactly one node per instance.
// The registrar owns its nodes: a watch on each one, and an audit every
// audit interval, write again a node deleted or changed by hand. Deregister
// writes a serving instance Draining before it deletes its node, so that
// the departure is recorded as deliberate (registry.Snapshot's Retired)
// and clients release the instance at once.
//
// A Discovery follows each service with one goroutine and one set of
// watches shared by all of its watchers: a children watch and a data watch
// on the service's node and a data watch on each instance node. A changed
// instance is read alone; the whole service is read again only after a
// reconnection, a new session or an error. While ZooKeeper is unreachable
// the last list is kept and marked stale (Snapshot.StaleSince). A bad value
// is skipped (logged once, counted in Stats().SkippedValues) and the other
// instances are served. Snapshot.Revision is the highest zxid read; a
// reload that finds a lower one (a server restored or restarted empty)
// starts a new Generation.
//
// Operator overrides (SetOverride, ClearOverride) live in the value of the
// service's persistent node, since an ephemeral node has no children: a map
// from instance ID to {"weight":N,"registered_at":...}. An override applies
// while the instance has that RegisteredAt, so it survives the registrar
// writing its nodes under a new session and does not apply to a new process
// registering the same ID; entries of instances that are gone are dropped at
// the next edit.
//
// A service's settings, its canary and its call policy, are persistent
// nodes at the paths of the etcd backend's keys (<root>.canary/<service>,
// <root>.policy/<service>), written by SetCanary and SetPolicy and
// followed over a Discovery's connection by NewCanaries and NewPolicies.
//
// The client library's goroutines end with Close, and its log goes to the
// configured slog.Logger at debug level.
package zookeeper
