// Package served makes the served list: what a consumer of one service is
// handed, from a registry.Discovery, in one pipeline shared by the gRPC
// resolver (each muster:/// channel is a consumer) and the xDS control
// plane (each published service is one). Both therefore serve the same
// instances under the same faults.
//
// A Pipeline applies, in order, to each snapshot of a service:
//
//  1. empty-list protection (protector, protection): a list that shrank
//     below a fraction of the largest served within a window is withheld,
//     per cluster for a snapshot of several, and lifts by itself;
//  2. the deletion grace (grace): an instance that left while served, not
//     drained and not retired by the registry, is still served a while;
//  3. the target's filters (Target: version, metadata, and the locality
//     when the zone fallback is off) and subsetting (subset: rendezvous
//     hashing on the client ID);
//  4. the service's settings (canary, call policy), followed once per
//     service (settingsHub) and carried on every List;
//
// and keeps each service's last good list on disk (snapshotStore) to start
// from while the registry has not answered. The consumer adds only its own
// form: the resolver its gRPC endpoints and balancer, the control plane its
// resources and locality.
//
// Sharing is per target, never per consumer: one Discovery watcher and one
// goroutine per target (feed) hand each change to the target's followers in
// turn, and followers serving the same list are handed the same Chosen,
// built once (Config.Build). Each Follower keeps what is its own (its
// protection's reference, its holds, its first state and timers), so a
// consumer that joins late or stays behind decides for itself. The pure
// parts (protector, grace, subset, Target.filter) read no clock and start
// nothing; the Follower gives them the time.
//
// All types are safe for concurrent use.
package served
