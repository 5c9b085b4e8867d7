package etcd

import (
	"context"
	"sync/atomic"

	"github.com/musterhq/muster/registry"
)

// hooksOf returns o's test hooks, made on first use.
func hooksOf(o *options) *registrarHooks {
	if o.hooks == nil {
		o.hooks = &registrarHooks{}
	}
	return o.hooks
}

// WithBroadcastDeregisters makes a Registrar's Deregisters wait as they did
// before each waited for its own key: woken by every change of the
// registrar's state (every status update, every transaction landed).
func WithBroadcastDeregisters() Option {
	return func(o *options) { hooksOf(o).broadcastDeregisters = true }
}

// WakeupCount counts how many times the waiting Registers and Deregisters
// of the Registrar given CountWakeups woke up to look again.
type WakeupCount struct{ total, most atomic.Int64 }

// CountWakeups makes a Registrar count its waiting calls' wake-ups in c.
func CountWakeups(c *WakeupCount) Option {
	return func(o *options) {
		hooksOf(o).woken = func(n int64) {
			c.total.Add(n)
			for {
				most := c.most.Load()
				if n <= most || c.most.CompareAndSwap(most, n) {
					return
				}
			}
		}
	}
}

// Load returns the wake-ups counted, in all and the most by one call.
func (c *WakeupCount) Load() (total, most int64) { return c.total.Load(), c.most.Load() }

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

// KeyGone reports whether r counts the key of service name's instance id
// as gone, as a waiting Deregister of it checks.
func KeyGone(r *Registrar, name, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys.isGone(registry.Key(r.opts.prefix, name, id))
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
