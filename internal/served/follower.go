package served

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/musterhq/muster/registry"
)

// Follower serves one target to one consumer. Its target's feed (feed.go)
// hands it each change of the registry; its own goroutine (run) delivers
// its first list and runs its timers and settings.
type Follower struct {
	p      *Pipeline
	c      Consumer
	t      Target
	w      registry.Watcher // the target's, shared
	states *targetStates    // shared with the target's other followers
	log    *slog.Logger
	stop   context.CancelFunc
	done   chan struct{}
	wake   wakeups

	mu    sync.Mutex // guards what follows; held while calling the consumer
	state followState
}

// wakeups are what the follower's goroutine waits for besides its timers.
type wakeups struct {
	// rearm tells run that the feed changed the protection state or a
	// hold, so that the lift timer is set again.
	rearm chan struct{}
	// settings is signalled when the service's settings change; nil
	// without Config.Canaries and Config.Policies.
	settings <-chan struct{}
	// settingsReady is closed once the service's settings are read; nil
	// without settings.
	settingsReady <-chan struct{}
}

// followState is what the follower served and decides by.
type followState struct {
	closed    bool
	holding   bool // the first list waits for the service's settings (run); the feed delivers nothing
	delivered bool // a list or an error reached the consumer
	live      bool // the last list came from the registry, not the disk
	withheld  bool // protection is withholding the live list
	protect   protection
	grace     grace
	sent      *Chosen // the list last served
	canary    registry.Canary
	policy    registry.Policy
	settings  uint64 // changes of canary and policy seen
}

// Follow starts serving t to c and returns at once: c gets its first list
// from the Discovery's cache or the disk snapshot when either has the
// service, else when the first load completes (and, with settings, once
// they are read, within Config.FirstState), or Fail. It fails when the
// Discovery cannot watch t's service (a name it refuses, a closed
// Discovery). Close stops it.
func (p *Pipeline) Follow(t Target, c Consumer) (*Follower, error) {
	followsSettings := p.cfg.Policies != nil || p.cfg.Canaries != nil
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{
		p:    p,
		c:    c,
		t:    t,
		log:  p.cfg.Logger.With("service", t.Service),
		stop: cancel,
		done: make(chan struct{}),
		wake: wakeups{rearm: make(chan struct{}, 1)},
		state: followState{
			protect: newProtection(p.cfg.ProtectFraction, p.cfg.ProtectWindow),
			grace:   grace{period: p.cfg.DeletionGrace},
			// Set before the feed can see f: its first list waits for
			// the settings (run).
			holding: followsSettings,
		},
	}
	if err := p.states.join(p, f); err != nil {
		cancel()
		return nil, err
	}
	if followsSettings {
		f.wake.settings, f.wake.settingsReady = p.settings.join(p, t.Service, f)
	}
	go f.run(ctx)
	return f, nil
}

// Close stops the follower and waits for its goroutine; once it returns,
// the consumer is called no more. It is safe to call more than once.
func (f *Follower) Close() {
	f.stop()
	<-f.done
	f.mu.Lock()
	was := f.state.closed
	f.state.closed = true
	f.mu.Unlock()
	if was {
		return
	}
	f.p.states.leave(f)
	if f.wake.settings != nil {
		f.p.settings.leave(f.t.Service, f)
	}
}

func (f *Follower) run(ctx context.Context) {
	defer close(f.done)
	cfg := &f.p.cfg
	first := time.NewTimer(cfg.FirstState)
	defer first.Stop()
	firstC := first.C
	// lift fires when protection would lift with no new snapshot: a
	// registry that really shrank may stay quiet afterwards.
	lift := cfg.Clock.NewTimer()
	defer lift.Stop()
	if f.wake.settingsReady != nil {
		// The first list waits for the service's settings (holding keeps
		// the feed from delivering meanwhile), at most the first-state
		// timeout: a list without its policy or canary would let the
		// first calls run without the service's timeout and retries, and
		// a client that does not wait for ready must not hang on a store
		// that does not answer.
		select {
		case <-f.wake.settingsReady:
		case <-firstC:
			firstC = nil
			f.log.Warn("service settings not read within the first-state timeout; serving without them until they arrive",
				"timeout", cfg.FirstState)
		case <-ctx.Done():
			return
		}
	}
	f.mu.Lock()
	s := &f.state
	s.holding = false
	if f.wake.settings != nil {
		// What the settings were signalled for so far is read here, with
		// the first list.
		select {
		case <-f.wake.settings:
		default:
		}
		s.canary, s.policy = f.p.settings.current(f.t.Service)
	}
	snap := f.w.Snapshot()
	if !snap.Loaded {
		// The disk snapshot first: a load error reported before it would
		// keep it from serving.
		f.startFromDisk()
	}
	f.update(cfg.Clock.Now(), snap)
	if firstC == nil && !s.delivered {
		f.fail(fmt.Errorf("first load not complete after %v", cfg.FirstState))
	}
	f.mu.Unlock()
	for {
		f.mu.Lock()
		if s.delivered && s.live {
			firstC = nil
		}
		liftC := f.armLift(lift)
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-f.wake.rearm:
		case <-liftC:
			f.mu.Lock()
			f.update(cfg.Clock.Now(), f.w.Snapshot())
			f.mu.Unlock()
		case <-f.wake.settings:
			c, p := f.p.settings.current(f.t.Service)
			f.setting(c, p)
		case <-firstC:
			firstC = nil
			f.mu.Lock()
			if !s.delivered {
				f.fail(fmt.Errorf("first load not complete after %v", cfg.FirstState))
			}
			f.mu.Unlock()
		}
	}
}

// setting applies the service's new settings and, once the consumer has a
// list, serves the same list again with them.
func (f *Follower) setting(c registry.Canary, p registry.Policy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &f.state
	s.canary, s.policy = c, p
	s.settings++
	if s.delivered && s.sent != nil {
		f.push(s.sent)
	}
}

// updateFromFeed is the feed's delivery of a change. It reads the snapshot
// and the clock under the follower's lock, as the follower's own goroutine
// does: a lift in between may have served a newer snapshot, and
// protection's decisions must not go back in time.
func (f *Follower) updateFromFeed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &f.state
	if s.closed || s.holding {
		return // holding: run delivers the latest snapshot when the hold ends
	}
	was, held := s.withheld, len(s.grace.held) > 0
	f.update(f.p.cfg.Clock.Now(), f.w.Snapshot())
	if was || s.withheld || held || len(s.grace.held) > 0 {
		// The lift time or a hold's end moved; run sets its timer again.
		select {
		case f.wake.rearm <- struct{}{}:
		default:
		}
	}
}

// armLift sets t to fire when protection would next change its decision
// or a held instance's grace ends, and returns its channel; nil (and t
// stopped) while neither is pending.
func (f *Follower) armLift(t Timer) <-chan time.Time {
	s := &f.state
	at, ok := s.protect.next()
	if g, held := s.grace.next(); held && (!ok || g.Before(at)) {
		at, ok = g, true
	}
	if !ok {
		t.Stop()
		return nil
	}
	t.Reset(at.Sub(f.p.cfg.Clock.Now()))
	return t.C()
}

// update serves snap, the watcher's snapshot, through protection, the
// grace and the target's filters. f.mu is held.
func (f *Follower) update(now time.Time, snap registry.Snapshot) {
	s := &f.state
	if !snap.Loaded {
		if snap.Err != nil && !s.delivered {
			f.fail(snap.Err)
		}
		return
	}
	cfg := &f.p.cfg
	since := s.protect.since()
	kept := s.protect.kept()
	serve, withheld := s.protect.decide(now, snap)
	if withheld {
		f.p.protected.Add(1)
		if !s.withheld {
			attrs := []any{"live", len(snap.Instances), "served", len(serve),
				"fraction", cfg.ProtectFraction, "window", cfg.ProtectWindow}
			if s.protect.held != nil {
				attrs = append(attrs, "clusters", s.protect.held)
			}
			f.log.Warn("empty-list protection: keeping the last good list", attrs...)
		}
	} else if s.withheld {
		f.log.Info("empty-list protection lifted", "live", len(snap.Instances), "served", kept,
			"withheld_for", now.Sub(since))
	}
	s.withheld = withheld
	out, ev := s.grace.apply(now, snap.Instances, serve, snap.Retired, f.states.departures)
	f.logGrace(ev)
	c := f.states.state(out, f.choose, cfg.Build)
	same := s.delivered && s.live && s.sent != nil && sameList(c.Instances, s.sent.Instances)
	s.live = true // before the push: it says where the list came from (emptyReason)
	if !same {
		f.push(c)
	}
	if f.p.snaps != nil && !withheld && !snap.Stale() {
		if err := f.p.snaps.save(f.t.Service, positionOf(snap), serve, now, f.w.Snapshot); err != nil {
			f.log.Error("cannot write the disk snapshot", "error", err)
		}
	}
}

// logGrace logs the holds that began, ended by a return, or ran out.
func (f *Follower) logGrace(ev graceEvents) {
	if ev.began != nil {
		f.p.held.Add(uint64(len(ev.began)))
		f.log.Warn("instances left the registry while serving; held for the deletion grace",
			"ids", joinIDs(ev.began), "grace", f.state.grace.period)
	}
	if ev.returned != nil {
		f.log.Info("held instances are back in the registry", "ids", joinIDs(ev.returned))
	}
	if ev.expired != nil {
		f.log.Info("held instances did not come back within the deletion grace; removed", "ids", joinIDs(ev.expired))
	}
}

// startFromDisk serves the disk snapshot of the service, if there is a
// usable one, while the registry has not answered.
func (f *Follower) startFromDisk() {
	if f.p.snaps == nil {
		return
	}
	list, savedAt, err := f.p.snaps.load(f.t.Service)
	switch {
	case errors.Is(err, errNoSnapshot):
		return
	case err != nil:
		f.log.Error("ignoring the disk snapshot", "error", err)
		return
	}
	f.log.Warn("registry not loaded yet; starting from the disk snapshot",
		"instances", len(list), "saved_at", savedAt, "age", time.Since(savedAt).Round(time.Second))
	f.push(f.states.state(list, f.choose, f.p.cfg.Build))
}

// choose applies the target's filters, then subsetting, to a service's
// list.
func (f *Follower) choose(list []*registry.Instance) []*registry.Instance {
	cfg := &f.p.cfg
	return subset(f.t.filter(list, cfg.ZoneFallback), cfg.ClientID, cfg.SubsetSize)
}

// push serves c to the consumer with the service's settings. f.mu is held.
func (f *Follower) push(c *Chosen) {
	s := &f.state
	l := List{Chosen: c, Canary: s.canary, Policy: s.policy, Settings: s.settings}
	if len(c.Instances) == 0 {
		l.Why = f.emptyReason(c)
	}
	f.c.Serve(l)
	f.p.updates.Add(1)
	s.delivered = true
	s.sent = c
}

// fail tells the consumer that nothing is known yet. f.mu is held.
func (f *Follower) fail(err error) {
	f.c.Fail(fmt.Errorf("muster: no instances of %q known yet: %w", f.t.Service, err))
	f.state.delivered = true
	f.state.live = false
}
