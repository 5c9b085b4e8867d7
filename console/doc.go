// Package console serves Muster's web console: a live view of the services
// of a registry, and, for an operator holding the admin credential, the
// drain, undrain and weight actions of the muster command.
//
// The console reads and writes a registry only through a registry.Store
// (etcd.NewStore, zookeeper.Open), which stays the caller's: the store's
// Discovery lists and follows the services, its canaries and policies are
// followed as clients follow them, and every write goes through its Admin.
// What a backend lacks the pages leave out: a store whose Admin keeps no
// journal (registry.HistoryReader) has no list of traced writes (the page
// says the registry keeps none), one whose instances have no leases
// (etcd.LeaseReader) no lease times, one that records no policy setter no
// setter.
//
// A Server is an http.Handler for the paths under /ui/ (mount it with
// mux.Handle("/ui/", srv)). Its pages and script are embedded (no network,
// no build step). Pages follow the registry by server-sent events: each
// event carries one service's (or the fleet's) complete current state and
// has the registry's revision as its id, so a browser that reconnects with
// Last-Event-ID is told whether it missed anything. A snapshot the registry
// could not refresh is sent marked stale, and the page shows a banner.
// Over a store with leases, a service page's stream also sends, every 5
// seconds, when the instances' leases run out (registrars renew them). The services pages are fed by
// one follower of the fleet, shared by all the open pages, which lists the
// services again every WithRelistInterval to find new ones. The service
// page shows 500 instances a page; filters and batch actions apply to every
// matching instance.
//
// Without an admin credential (WithAdminToken, WithAdminUsers) the console
// is read-only: it offers no action and refuses every state-changing
// request with 403. With one, an operator logs in with the token, or with
// a user name and password checked against bcrypt hashes, and gets a
// session cookie and a CSRF token; an action needs both (and, when the
// browser sends an Origin, the console's own), sets or clears the same
// overrides as muster drain, undrain and weight (the Admin's SetOverride,
// ClearOverride), and is logged with who asked for what (the user's name,
// or the token's session). Each write is made by the store's Admin for
// registry.Actor{Who: the user, Source: registry.SourceConsole}: etcd traces
// it in the service's journal, in the same transaction, and the service
// page lists the service's newest traced writes, which need no login to
// read. The same session and token let an operator edit a service's call
// policy on its page: FIELD=VALUE assignments merged into the stored
// policy as muster policy set merges them (registry.PolicyEdit), or a
// clear, recorded as set by "alice (console)" where the backend records a
// setter; a value out of range is refused with 400 naming the field and
// its range. The page shows the policy with who set it and when, followed
// live.
//
// Given an xDS control plane (WithXDS), the console has a page of the
// connected xDS clients: node, zone, since when, the services they follow
// and, per resource type, the version sent, the version acknowledged and
// the last rejection with the client's error. Its stream reads the list
// every second and sends it when it changed.
//
// Given legacy sources (WithLegacy), the console reads services the way
// clients' legacy.Merged Discovery does: Muster's registry and the old
// etcd layouts (on the client of an *etcd.Store), one instance per
// address, each with where it was found (a Source column and filter);
// actions apply to Muster's instances only.
//
// NewClusters makes a console over several independent registries (a
// region or a data centre each, a Store each), read as clients'
// clusters.Discovery reads them: the pages show the union, every instance with its cluster (a
// Cluster column and filter; an ID found in two clusters is two
// instances), the services page each cluster's health (fresh, stale since
// when and why, unreachable) and each service's instances per cluster, and
// a service's page each cluster's part, canary setting and call policy.
// Actions and policy edits name their cluster and write there only. Each
// cluster is listed and read on its own: one that does not answer keeps
// its services and instances shown as last read, and holds back neither
// the others' changes nor the pages. Over several clusters a stream never
// answers "resumed": the union's revision is a sum that names no state.
//
// Every value read from a registry or sent by an xDS client is rendered as
// text by the page's script.
//
// A Server is safe for concurrent use; Close ends its event streams and
// the watches it opened, and leaves its stores open.
package console
