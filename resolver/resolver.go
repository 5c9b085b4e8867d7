package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
)

// musterResolver feeds one channel. Its target's feed (feed.go) hands it
// each change of the registry; its own goroutine (run) delivers its first
// state and runs its timers and canary setting. ResolveNow is a no-op
// because the watch pushes every change.
type musterResolver struct {
	b      *Builder
	cc     grpcresolver.ClientConn
	q      query
	w      registry.Watcher // the target's, shared
	cancel context.CancelFunc
	done   chan struct{}
	log    *slog.Logger
	// rearm tells run that the feed changed the protection state, so that
	// the lift timer is set again.
	rearm    chan struct{}
	settings <-chan struct{} // signalled when the service's settings change; nil without WithCanaries and WithPolicies
	// settingsReady is closed once the service's settings are read; nil
	// without WithCanaries and WithPolicies.
	settingsReady <-chan struct{}

	mu        sync.Mutex // guards what follows; held while calling the channel
	closed    bool
	holding   bool // the first state waits for the service's settings (run); the feed delivers nothing
	protect   protection
	grace     grace
	delivered bool          // a state or error reached the channel
	live      bool          // the last state came from the registry, not the disk
	states    *targetStates // shared with the Builder's other channels of the target
	sent      *builtState   // the state last pushed
	withheld  bool          // protection is withholding the live list
	canary    registry.Canary
	policy    registry.Policy
	lbConfig  string                     // the loadBalancingConfig handed to the channel; "" for none (channelBalancer)
	byDefault bool                       // lbConfig is DefaultBalancer's, to be settled at the first push (decideDefault)
	sc        *serviceconfig.ParseResult // the service config handed, once made
	scStale   bool                       // policy changed since sc was made
}

// ResolveNow does nothing: the channel already gets every change as it
// happens. It is cheap and starts no goroutine.
func (r *musterResolver) ResolveNow(grpcresolver.ResolveNowOptions) {}

// Close stops the resolver and waits for its goroutine; once it returns,
// the channel is called no more.
func (r *musterResolver) Close() {
	r.cancel()
	<-r.done
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.b.states.leave(r)
	if r.settings != nil {
		r.b.settings.leave(r.q.service, r)
	}
}

func (r *musterResolver) run(ctx context.Context) {
	defer close(r.done)
	first := time.NewTimer(r.b.opts.firstState)
	defer first.Stop()
	firstC := first.C
	// lift fires when protection would lift with no new snapshot: a
	// registry that really shrank may stay quiet afterwards.
	clk := r.b.opts.clock
	lift := clk.newTimer()
	defer lift.stop()
	if r.settingsReady != nil {
		// The first state waits for the service's settings (holding keeps
		// the feed from delivering meanwhile), at most the first-state
		// timeout: a state without its policy or canary would let the
		// first calls run without the service's timeout and retries, and
		// a client that does not wait for ready must not hang on a store
		// that does not answer.
		select {
		case <-r.settingsReady:
		case <-firstC:
			firstC = nil
			r.log.Warn("service settings not read within the first-state timeout; serving without them until they arrive",
				"timeout", r.b.opts.firstState)
		case <-ctx.Done():
			return
		}
	}
	r.mu.Lock()
	r.holding = false
	if r.settings != nil {
		// What the settings were signalled for so far is read here, with
		// the first state.
		select {
		case <-r.settings:
		default:
		}
		r.canary, r.policy = r.b.settings.current(r.q.service)
	}
	snap := r.w.Snapshot()
	if !snap.Loaded {
		// The disk snapshot first: a load error reported before it would
		// keep it from serving.
		r.startFromDisk()
	}
	r.update(clk.now(), snap)
	if firstC == nil && !r.delivered {
		r.reportError(fmt.Errorf("first load not complete after %v", r.b.opts.firstState))
	}
	r.mu.Unlock()
	for {
		r.mu.Lock()
		if r.delivered && r.live {
			firstC = nil
		}
		liftC := r.armLift(lift)
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-r.rearm:
		case <-liftC:
			r.mu.Lock()
			r.update(clk.now(), r.w.Snapshot())
			r.mu.Unlock()
		case <-r.settings:
			c, p := r.b.settings.current(r.q.service)
			r.setting(func() { r.canary, r.policy = c, p })
		case <-firstC:
			firstC = nil
			r.mu.Lock()
			if !r.delivered {
				r.reportError(fmt.Errorf("first load not complete after %v", r.b.opts.firstState))
			}
			r.mu.Unlock()
		}
	}
}

// setting applies a new service setting (set changes r.canary or
// r.policy) and, once the channel has a state, pushes the same endpoints
// again with it.
func (r *musterResolver) setting(set func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set()
	r.scStale = true
	if r.delivered && r.sent != nil {
		r.push(r.sent)
	}
}

// updateFromFeed is the feed's delivery of a change to the channel. It
// reads the snapshot and the clock under the channel's lock, as the
// channel's own goroutine does: a lift in between may have served a newer
// snapshot, and protection's decisions must not go back in time.
func (r *musterResolver) updateFromFeed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.holding {
		return // holding: run delivers the latest snapshot when the hold ends
	}
	was, held := r.withheld, len(r.grace.held) > 0
	r.update(r.b.opts.clock.now(), r.w.Snapshot())
	if was || r.withheld || held || len(r.grace.held) > 0 {
		// The lift time or a hold's end moved; run sets its timer again.
		select {
		case r.rearm <- struct{}{}:
		default:
		}
	}
}

// armLift sets t to fire when protection would next change its decision
// or a held instance's grace ends, and returns its channel; nil (and t
// stopped) while neither is pending.
func (r *musterResolver) armLift(t liftTimer) <-chan time.Time {
	at, ok := r.protect.next()
	if g, held := r.grace.next(); held && (!ok || g.Before(at)) {
		at, ok = g, true
	}
	if !ok {
		t.stop()
		return nil
	}
	t.reset(at.Sub(r.b.opts.clock.now()))
	return t.c()
}

// update pushes snap, the watcher's snapshot, to the channel, through
// protection and the target's filters. r.mu is held.
func (r *musterResolver) update(now time.Time, snap registry.Snapshot) {
	if !snap.Loaded {
		if snap.Err != nil && !r.delivered {
			r.reportError(snap.Err)
		}
		return
	}
	since := r.protect.since()
	kept := r.protect.kept()
	serve, withheld := r.protect.decide(now, snap)
	if withheld {
		r.b.protected.Add(1)
		if !r.withheld {
			attrs := []any{"live", len(snap.Instances), "served", len(serve),
				"fraction", r.b.opts.protectFraction, "window", r.b.opts.protectWindow}
			if r.protect.held != nil {
				attrs = append(attrs, "clusters", r.protect.held)
			}
			r.log.Warn("empty-list protection: keeping the last good list", attrs...)
		}
	} else if r.withheld {
		r.log.Info("empty-list protection lifted", "live", len(snap.Instances), "served", kept,
			"withheld_for", now.Sub(since))
	}
	r.withheld = withheld
	out, ev := r.grace.apply(now, snap.Instances, serve, snap.Retired, r.states.departures)
	r.logGrace(ev)
	st := r.states.state(out, r.choose)
	same := r.delivered && r.live && r.sent != nil && sameList(st.list, r.sent.list)
	r.live = true // before the push: it says where the list came from (emptyReason)
	if !same {
		r.push(st)
	}
	if r.b.snaps != nil && !withheld && !snap.Stale() {
		if err := r.b.snaps.save(r.q.service, positionOf(snap), serve, now, r.w.Snapshot); err != nil {
			r.log.Error("cannot write the disk snapshot", "error", err)
		}
	}
}

// logGrace logs the holds that began, ended by a return, or ran out.
func (r *musterResolver) logGrace(ev graceEvents) {
	if ev.began != nil {
		r.b.held.Add(uint64(len(ev.began)))
		r.log.Warn("instances left the registry while serving; held for the deletion grace",
			"ids", joinIDs(ev.began), "grace", r.grace.period)
	}
	if ev.returned != nil {
		r.log.Info("held instances are back in the registry", "ids", joinIDs(ev.returned))
	}
	if ev.expired != nil {
		r.log.Info("held instances did not come back within the deletion grace; removed", "ids", joinIDs(ev.expired))
	}
}

// startFromDisk serves the disk snapshot of the service, if there is a
// usable one, while the registry has not answered.
func (r *musterResolver) startFromDisk() {
	if r.b.snaps == nil {
		return
	}
	list, savedAt, err := r.b.snaps.load(r.q.service)
	switch {
	case errors.Is(err, errNoSnapshot):
		return
	case err != nil:
		r.log.Error("ignoring the disk snapshot", "error", err)
		return
	}
	r.log.Warn("registry not loaded yet; starting from the disk snapshot",
		"instances", len(list), "saved_at", savedAt, "age", time.Since(savedAt).Round(time.Second))
	r.push(r.states.state(list, r.choose))
}

// choose applies the target's filters, then subsetting, to a service's
// list.
func (r *musterResolver) choose(list []*registry.Instance) []*registry.Instance {
	o := &r.b.opts
	return subset(r.q.filter(list, o.zoneFallback), o.clientID, o.subsetSize)
}

// push hands st to the channel, with the service's canary setting, call
// policy and the channel's service config (its balancer and, with
// WithPolicyServiceConfig, the call policy's method config).
func (r *musterResolver) push(st *builtState) {
	state := grpcresolver.State{Endpoints: st.eps, Addresses: st.addrs, Attributes: r.stateAttributes()}
	if len(st.eps) == 0 {
		state.Attributes = lbattr.WithEmptyReason(state.Attributes, r.emptyReason(st))
	}
	if r.byDefault {
		r.decideDefault(state)
	}
	state.ServiceConfig = r.serviceConfig()
	// An error here (for example: no endpoints for round_robin) makes gRPC
	// call ResolveNow with backoff; the next change is pushed anyway.
	_ = r.cc.UpdateState(state)
	r.b.updates.Add(1)
	r.delivered = true
	r.sent = st
	r.states.prepare()
}

// stateArrays holds the arrays of the next state, allocated after a push
// rather than at the next change: allocating and zeroing them (and, while
// the garbage collector runs, paying its assist for them) is then off the
// path from a change to the channel. They are fresh arrays, never handed
// to gRPC before, since gRPC and balancers may keep the previous state.
type stateArrays struct {
	eps   []grpcresolver.Endpoint
	addrs []grpcresolver.Address
}

// take returns arrays of n endpoints and addresses: the prepared ones if
// they are large enough, else new ones. They are not handed out again.
func (a *stateArrays) take(n int) ([]grpcresolver.Endpoint, []grpcresolver.Address) {
	eps, addrs := a.eps, a.addrs
	a.eps, a.addrs = nil, nil
	if cap(eps) < n || cap(addrs) < n {
		return make([]grpcresolver.Endpoint, n), make([]grpcresolver.Address, n)
	}
	// Capped at n, so that an append by the receiver copies.
	return eps[:n:n], addrs[:n:n]
}

// prepare allocates the arrays of the next state for about n instances,
// with room for some growth.
func (a *stateArrays) prepare(n int) {
	size := n + n/8 + 4
	a.eps = make([]grpcresolver.Endpoint, size)
	a.addrs = make([]grpcresolver.Address, size)
}

// reuseEndpoints fills eps and addrs (of len(list)) with the endpoints of
// list and their addresses (for balancers that read only addresses, such
// as balancer/base), reusing those built for prev (whose endpoints are
// prevEPs) for unchanged instances. Both lists are sorted by ID, so one
// merge pass finds them, and an unchanged instance is the same pointer in
// both: an update touching a few instances of a large service builds only
// those, and the rest of the pass is the copy gRPC requires.
func reuseEndpoints(eps []grpcresolver.Endpoint, addrs []grpcresolver.Address, list, prev []*registry.Instance, prevEPs []grpcresolver.Endpoint) {
	j := 0
	for i, in := range list {
		switch {
		case j < len(prev) && prev[j] == in:
			eps[i] = prevEPs[j] // the common case: no string compared
			j++
		default:
			for j < len(prev) && prev[j].ID < in.ID {
				j++
			}
			if j < len(prev) && prev[j].ID == in.ID && (prev[j] == in || prev[j].Equal(*in)) {
				// Back in step after an instance left or joined: the
				// ones after it take the common case again.
				eps[i] = prevEPs[j]
				j++
			} else {
				eps[i] = endpointOf(in)
			}
		}
		addrs[i] = eps[i].Addresses[0]
	}
}

func (r *musterResolver) reportError(err error) {
	r.cc.ReportError(fmt.Errorf("muster: no instances of %q known yet: %w", r.q.service, err))
	r.delivered = true
	r.live = false
}
