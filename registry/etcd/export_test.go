package etcd

import (
	"context"

	"github.com/musterhq/muster/registry"
)

// WithBroadcastDeregisters makes a Registrar's Deregisters wait as they did
// before each waited for its own key: woken by every change of the
// registrar's state (every status update, every transaction landed).
func WithBroadcastDeregisters() Option { return func(o *options) { o.broadcastDeregisters = true } }

// Wakeups returns how many times r's waiting Registers and Deregisters woke
// up to look again, in all and the most by one call, since r started.
func Wakeups(r *Registrar) (total, most int64) {
	return r.wakeups.Load(), r.mostWakeups.Load()
}

// Waiting returns the number of keys whose Deregisters r holds a signal
// for, and the number of Deregisters waiting on those signals.
func Waiting(r *Registrar) (keys, waiters int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sig := range r.keys.gone {
		waiters += sig.waiters
	}
	return len(r.keys.gone), waiters
}

// InFlight returns the number of keys r has a transaction in flight for.
func InFlight(r *Registrar) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keys.inflight)
}

// FollowPolicy sends the policies of service on ch as WatchPolicy does,
// until ctx ends; then it closes ch. Given an unbuffered channel, a test
// receives every value sent, none coalesced away.
func FollowPolicy(p *Policies, ctx context.Context, service string, ch chan registry.Policy) {
	p.follow(ctx, service, ch)
}
