// Package resolver connects gRPC channels to a Muster registry.
//
// Dial opens a channel to a service of a registry.Store (registry/etcd's
// Open): it follows the service's instances, canary and call policy, and
// balances with muster_p2c. The transport credentials are the caller's
// to choose; Dial chooses none:
//
//	conn, err := resolver.Dial(store, "user?zone=eu-1a",
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// A Builder does the same for any registry.Discovery, with the options
// of this package (Builder.Dial, or grpc.WithResolvers). It resolves
// "muster:///<service>" targets:
//
//	b := resolver.NewBuilder(discovery)
//	conn, err := grpc.NewClient("muster:///user?zone=eu-1a", grpc.WithResolvers(b),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// Pass the Builder per channel with grpc.WithResolvers; Register installs it
// in gRPC's global registry instead, and refuses to replace a resolver that
// already owns the scheme.
//
// An invalid option (a protection fraction outside 0..1, say) is never
// ignored: New returns an error naming every invalid option; NewBuilder,
// whose signature lets it be called inline as above, logs that error and
// returns a Builder whose every Build fails with it, so the channel's
// calls fail with codes.Unavailable naming the option.
//
// # Targets
//
// The target's path is the service name; its query filters the instances:
// version=<v> keeps instances of that version, meta.<key>=<value> those
// whose metadata has that value, and zone=<z> and region=<r> say where the
// client runs (WithZone and WithRegion set defaults): the resolver then
// hands every instance, with the client's locality as a state attribute
// (LocalityOf), for Muster's balancers to keep calls in the zone and spill
// to the region and beyond by health (docs/BALANCERS.md, "Locality"); a
// balancer that does not read it (round_robin, pick_first) spreads over
// all of them. WithZoneFallback(false) makes the zone a hard filter
// instead: only the zone's instances (the region's, without a zone), none
// when it has none. lb=<balancer> chooses the channel's balancer (see
// Balancing). Any other key, an empty value, a repeated key, an authority
// or an invalid service name makes Build fail with an error matching
// ErrBadTarget that names the problem.
//
// # Balancing
//
// A channel balances with muster_p2c (DefaultBalancer) unless its user
// chooses otherwise: the resolver hands it a service config naming it,
// and importing this package registers muster_p2c and muster_wrr with
// gRPC, so no other import is needed. The choices, in the order they win:
//
//   - grpc.WithDisableServiceConfig() on the channel: the resolver hands
//     no service config, and gRPC runs the channel's own default service
//     config (grpc.WithDefaultServiceConfig) or pick_first;
//   - the target's lb=: p2c, wrr, or any balancer registered with gRPC
//     (muster:///user?lb=wrr, ?lb=round_robin);
//   - the Builder's WithBalancer (WithBalancer("") hands none, as above)
//     or WithPolicyServiceConfig;
//   - otherwise the channel's own default service config if it runs one
//     of Muster's balancers (grpc.WithDefaultServiceConfig naming
//     muster_p2c or muster_wrr is kept whole, with its settings and
//     method configs), else muster_p2c.
//
// gRPC lets a service config from the resolver replace the channel's
// default one, and a resolver cannot read the channel's dial options. So
// to tell the last two cases apart, the resolver hands the channel's first
// state without a service config: gRPC then applies the channel's own, and
// Muster's balancers mark the state they receive. A channel whose default
// service config names a balancer of gRPC's (round_robin, pick_first)
// looks the same as one with none: it is handed muster_p2c, and the
// Builder logs once, at level info, that this replaces
// grpc.WithDefaultServiceConfig and how to keep it.
//
// # States
//
// Build never blocks on the registry. The channel gets its first state at
// once from the Discovery's cache, or from the disk snapshot
// (WithSnapshotDir) while the registry has not answered; with neither, it
// gets a resolver error when the first load fails or the first-state
// timeout (WithFirstStateTimeout, 500ms) passes, so that calls which do not
// wait for ready fail with Unavailable instead of hanging until their
// deadline. A service with no instances resolves to an empty state, which
// fails such calls at once too. With WithCanaries or WithPolicies, the first
// state waits for the service's settings (each source's first value), so
// that the first calls carry them, but no longer than the first-state
// timeout: past it, the channel gets the list without them and the
// settings in a later state.
//
// What a channel is served (protection, the deletion grace, filters,
// subsetting, settings) is made by the pipeline Muster's xDS control plane
// uses too, so both serve the same instances under the same faults. Each
// Discovery snapshot becomes one UpdateState: endpoints sorted by
// instance ID, each carrying its registry.Instance as a comparable
// attribute (InstanceOf reads it), with the same endpoints in Addresses for
// address-based balancers (grpc's balancer/base). The channels of a
// Builder that resolve the same target (service and filters) share one
// Discovery watcher, one goroutine that hands each change to each of them
// in turn, and the state itself: a change costs the target one list's
// arrays, in which only the endpoints of changed instances are new, however
// many channels follow it. A channel whose balancer blocks in
// UpdateClientConnState therefore delays the other channels of its target.
// ResolveNow is a no-op: the watch pushes every change. Empty-list
// protection (WithProtection) withholds an update that would shrink the
// list below a fraction of the largest list served in a recent window (held
// at the window before a run of losses, so a long trickle of expiries is
// judged against the size before it), and keeps serving the last good list;
// it lifts when the list grows back, or by itself a window after the last
// loss (a timer, so also when the registry stays quiet), and both its start
// and its lift are logged. A snapshot of several independent clusters
// (registry/clusters: Snapshot.Clusters) is judged cluster by cluster:
// one cluster's loss is withheld against that cluster's own size while
// the other clusters' changes are served (docs/CLUSTERS.md).
//
// The deletion grace (WithDeletionGrace, 3s) keeps serving an instance that
// left the registry while it served: not Draining, and not recorded by the
// registry as a deliberate departure (registry.Snapshot's Retired; the etcd
// Registrar's Deregister drains an instance before it deletes it). etcd
// revokes live leases after a paused leader resumes, and the registrar
// writes its keys again within milliseconds; the instance's return ends the
// hold, so the channel keeps its connection. An instance that really
// crashed is listed for the grace, but its connection has failed and
// balancers pick only ready endpoints. The hold is beside protection, which
// judges the same lists with or without it. Holds are logged and counted
// (Stats().Held).
//
// WithCanaries and WithPolicies follow each service's canary and call
// policy (registry/etcd's Canaries and Policies) and hand them with every
// state (CanaryOf, PolicyOf): Muster's balancers route the canary's share
// and cap calls in flight by the policy's maxConcurrent, and with
// WithPolicyServiceConfig the channel gets the policy's timeout and
// retries as a service config (docs/POLICY.md).
//
// DirectBuilder resolves static "direct:///host:port,host:port" targets.
//
// # Idle channels
//
// A channel in gRPC's idle mode closes its resolver (the last channel of a
// target closes the target's watcher); on waking it builds a new one. Give
// the Discovery a linger time (registry/etcd.WithLinger) at least as long
// as the channels' idle timeout so that the woken channel finds the
// service's watch and cache warm.
//
// All types are safe for concurrent use.
package resolver
