// Package console serves Muster's web console: a live view of the services
// of a registry, and, for an operator holding the admin credential, the
// drain, undrain and weight actions of the muster command and the editing
// of a service's call policy. docs/CONSOLE.md is the guide to its pages.
//
// The console reads and writes a registry only through a registry.Store
// (etcd.NewStore, zookeeper.Open), which stays the caller's: the store's
// Discovery lists and follows the services, its canaries and policies are
// followed as clients follow them, and every write goes through its Admin.
// What a backend lacks the pages leave out: a store whose Admin keeps no
// journal (registry.HistoryReader) has no list of traced writes, one whose
// instances have no leases (etcd.LeaseReader) no lease times, one that
// records no policy setter no setter.
//
// A Server is an http.Handler for the paths under /ui/ (mount it with
// mux.Handle("/ui/", srv)). Its pages and script are embedded (no network,
// no build step). Pages follow the registry by server-sent events: each
// event carries one service's (or the fleet's) complete current state and
// has the registry's revision as its id, so a browser that reconnects with
// Last-Event-ID is told whether it missed anything. A snapshot the registry
// could not refresh is sent marked stale, and the page shows a banner. The
// services pages share one follower of the fleet, which lists the services
// again every WithRelistInterval to find new ones.
//
// Without an admin credential (WithAdminToken, WithAdminUsers) the console
// is read-only: it offers no action and refuses every state-changing
// request with 403. With one, an operator logs in with the token, or with
// a user name and password checked against bcrypt hashes, and gets a
// session cookie and a CSRF token; an action needs both (and, when the
// browser sends an Origin, the console's own). Each write is made by the
// store's Admin for registry.Actor{Who: the user, Source:
// registry.SourceConsole} and logged with who asked for what; a policy
// edit is FIELD=VALUE assignments merged into the stored policy as muster
// policy set merges them (registry.PolicyEdit), and a value out of range
// is refused with 400 naming the field and its range.
//
// Given an xDS control plane (WithXDS), the console has a page of the
// connected xDS clients: node, zone, since when, the services they follow
// and, per resource type, the versions sent and acknowledged and the last
// rejection with the client's error.
//
// Given legacy sources (WithLegacy), the console reads services the way
// clients' legacy.Merged Discovery does: Muster's registry and the old
// etcd layouts, one instance per address, each with where it was found;
// actions apply to Muster's instances only.
//
// NewClusters makes a console over several independent registries (a
// Store each), read as clients' clusters.Discovery reads them: the pages
// show the union, every instance with its cluster (an ID found in two
// clusters is two instances), and each cluster's health and settings.
// Actions and policy edits name their cluster and write there only. A
// cluster that does not answer keeps its part shown as last read and
// holds back neither the others nor the pages. Over several clusters a
// stream never answers "resumed": the union's revision is a sum that names
// no state.
//
// Every value read from a registry or sent by an xDS client is rendered as
// text by the page's script.
//
// A Server is safe for concurrent use; Close ends its event streams and
// the watches it opened, and leaves its stores open.
package console
