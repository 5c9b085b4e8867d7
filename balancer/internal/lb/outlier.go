package lb

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OutlierState is one endpoint's ejection state. It lives as long as the
// endpoint's stats (across pickers). The pick path reads it with atomic
// loads only; changes to the ejection itself are made under the
// Detector's mutex, on the completion path of a failed call.
type OutlierState struct {
	failures atomic.Int32 // consecutive failures while not ejected
	until    atomic.Int64 // 0 when not ejected, else end of the ejection (Nanotime)
	probe    atomic.Bool  // the current ejection's probe was handed out

	addr    string         // for logs; set before the state is shared
	changes *atomic.Uint64 // the Detector's count of admission changes; nil outside a Base

	// Cumulative counts, for metrics.
	calls     atomic.Uint64 // calls completed with a result (CountCall)
	failed    atomic.Uint64 // failures (Record)
	ejections atomic.Uint64 // ejections started

	// The current failure-percentage window's counts (OutlierConfig's
	// FailurePercent), of calls completed while not ejected.
	winCalls  atomic.Int64
	winFailed atomic.Int64

	// Guarded by Detector.mu.
	times      int32 // ejections in a row
	restoredAt int64 // when the last ejection ended (Nanotime), 0 if never
}

// Ejected reports whether the endpoint is ejected: either its ejection has
// not ended, or it has and the probe call that would end it has not
// succeeded yet. One atomic load; the pick path calls it first.
func (s *OutlierState) Ejected() bool { return s.until.Load() != 0 }

// Admit says whether a pick may use the endpoint at now. ok is true for an
// endpoint that is not ejected, and for the one call (probe true) that an
// endpoint whose ejection has ended lets through; a pick that got
// probe == true must use the endpoint, and pass probe to Detector.Record
// (or call ReleaseProbe when the call never went out).
func (s *OutlierState) Admit(now int64) (ok, probe bool) {
	u := s.until.Load()
	if u == 0 {
		return true, false
	}
	if now < u || !s.probe.CompareAndSwap(false, true) {
		return false, false
	}
	s.changed()
	return true, true
}

// Admissible reports what the ejection rule lets picks do with the
// endpoint at now: open (any number of calls: not ejected), or probe (one
// call: the ejection time is over and its probe was not handed out yet).
// It is the one notion of "admissible now" that the policies' pickers
// (through Admit), the locality levels' shares and color routing share.
func (s *OutlierState) Admissible(now int64) (open, probe bool) {
	u := s.until.Load()
	if u == 0 {
		return true, false
	}
	return false, now >= u && !s.probe.Load()
}

// changed counts a change of what the endpoint admits, so that pickers
// that derive shares from it recompute them once.
func (s *OutlierState) changed() {
	if s.changes != nil {
		s.changes.Add(1)
	}
}

// CountCall counts a call that completed with a result, for the calls
// metric of a policy without its own count (see Policy.Calls).
func (s *OutlierState) CountCall() { s.calls.Add(1) }

// Failures returns the failures Record counted.
func (s *OutlierState) Failures() uint64 { return s.failed.Load() }

// Succeeded accounts for a successful call that was not a probe: it ends
// the endpoint's run of consecutive failures. It does what Record does for
// such a call, without the clock.
func (s *OutlierState) Succeeded() {
	if s.failures.Load() != 0 { // read first: no write on the hot path
		s.failures.Store(0)
	}
}

// ReleaseProbe gives the probe back, for a probe call that was never sent
// (its transport was not ready), so that the next pick can probe.
func (s *OutlierState) ReleaseProbe() {
	s.probe.Store(false)
	s.changed()
}

// Detector ejects endpoints after consecutive failures, and, with a call
// policy's FailurePercent, by their share of failed calls over a window,
// for a growing time, never more than the configured share of its members.
// One per balancer. Record is safe for concurrent use and lock-free for
// every call that neither changes an ejection nor closes a window.
//
// Failure-percentage windows are kept lazily on the completion path: each
// call completed while not ejected is counted on its endpoint, and the
// first completion after the window's end closes it: under the mutex it
// judges every member (see OutlierConfig.FailurePercent) and starts the
// next window. No goroutine, no timer.
type Detector struct {
	name string // the policy's, for logs
	cfg  atomic.Pointer[OutlierConfig]

	winStart atomic.Int64  // start of the failure-percentage window (Nanotime); 0: none yet
	changes  atomic.Uint64 // counts every change of what an endpoint admits (OutlierState.Admissible)

	mu      sync.Mutex
	members []*OutlierState // the endpoints of the current picker
}

// SetConfig replaces the configuration. Ejections in force keep their end
// time.
func (d *Detector) SetConfig(c OutlierConfig) { d.cfg.Store(&c) }

// Config returns the configuration (the default before any SetConfig).
func (d *Detector) Config() OutlierConfig {
	if c := d.cfg.Load(); c != nil {
		return *c
	}
	return DefaultOutlierConfig()
}

// Changes returns a count that moves whenever an ejection starts or ends,
// or a probe is handed out or given back: what any endpoint of the
// Detector's balancer admits changed (OutlierState.Admissible). An
// ejection time running out is not a change; its end time is known.
func (d *Detector) Changes() uint64 { return d.changes.Load() }

// SetMembers sets the endpoints whose share is capped: those of the
// current picker. The slice must not be modified afterwards.
func (d *Detector) SetMembers(m []*OutlierState) {
	d.mu.Lock()
	d.members = m
	d.mu.Unlock()
}

// Record accounts for one call that reached the endpoint (it does not
// count it: see CountCall). failed says
// whether it failed (Classify's Failure); probe whether it was the probe
// Admit handed out. While an endpoint is ejected only its probe counts: a
// successful probe ends the ejection, a failed one ejects it again for
// longer; other calls that were in flight when it was ejected are ignored.
// now is read only when failed or probe is true.
//
// With failure-percentage ejection on, every call must be recorded with
// the clock: a success through Record with now, or through Succeeded.
func (d *Detector) Record(s *OutlierState, failed, probe bool, now int64) {
	if failed {
		s.failed.Add(1)
	}
	if probe {
		d.endProbe(s, failed, now)
		return
	}
	if !failed {
		s.Succeeded()
		if c := d.cfg.Load(); c != nil && c.percentage() {
			d.countWindow(s, c, false, now)
		}
		return
	}
	if s.until.Load() != 0 {
		return
	}
	c := d.cfg.Load()
	if c == nil || !c.Enabled() {
		return
	}
	if c.percentage() {
		d.countWindow(s, c, true, now)
	}
	if !c.consecutive() || s.failures.Add(1) < int32(c.ConsecutiveFailures) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s.failures.Store(0) // also when refused: the count starts over
	if s.until.Load() != 0 || !d.mayEjectLocked(c) {
		return
	}
	if s.restoredAt != 0 && now-s.restoredAt > int64(c.MaxEjectionTime) {
		s.times = 0 // healthy for a long while: start from the base time again
	}
	d.ejectLocked(s, c, now)
}

// Succeeded accounts for a successful call to s that was not a probe,
// for a caller that has not read the clock: as Record(s, false, false,
// now), reading the clock only when failure-percentage ejection is on.
func (d *Detector) Succeeded(s *OutlierState) {
	s.Succeeded()
	if c := d.cfg.Load(); c != nil && c.percentage() {
		d.countWindow(s, c, false, Nanotime())
	}
}

// countWindow counts a call to s that completed at now in the current
// failure-percentage window, and closes the window when it has ended.
func (d *Detector) countWindow(s *OutlierState, c *OutlierConfig, failed bool, now int64) {
	if s.until.Load() != 0 {
		return // ejected: the calls still in flight say nothing new
	}
	s.winCalls.Add(1)
	if failed {
		s.winFailed.Add(1)
	}
	start := d.winStart.Load()
	if start != 0 && now-start < int64(c.Interval) {
		return
	}
	if !d.winStart.CompareAndSwap(start, max(now, 1)) || start == 0 {
		return // another call closes it, or this one opened the first
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.judgeLocked(c, now)
}

// judgeLocked closes a failure-percentage window: it takes every member's
// counts (starting the next window's from zero) and, when at least
// FailurePercentMinimumHosts members completed c.MinRequests calls, ejects
// those of them whose share of failures exceeds c.FailurePercent, while
// the cap on the share ejected allows, the worst first.
func (d *Detector) judgeLocked(c *OutlierConfig, now int64) {
	type judged struct {
		s             *OutlierState
		calls, failed int64
	}
	var enough []judged
	for _, m := range d.members {
		calls, failed := m.winCalls.Swap(0), m.winFailed.Swap(0)
		if calls >= int64(c.MinRequests) {
			enough = append(enough, judged{m, calls, failed})
		}
	}
	if len(enough) < FailurePercentMinimumHosts {
		return
	}
	slices.SortFunc(enough, func(x, y judged) int { // worst share first
		return cmp.Compare(y.failed*x.calls, x.failed*y.calls)
	})
	for _, j := range enough {
		if j.failed*100 <= int64(c.FailurePercent)*j.calls {
			break
		}
		if j.s.until.Load() != 0 {
			continue
		}
		if !d.mayEjectLocked(c) {
			return
		}
		if j.s.restoredAt != 0 && now-j.s.restoredAt > int64(c.MaxEjectionTime) {
			j.s.times = 0
		}
		logger.Infof("%s: %s failed %d of %d calls in %v, over %d%%", d.name, j.s.addr, j.failed, j.calls, c.Interval, c.FailurePercent)
		j.s.failures.Store(0)
		d.ejectLocked(j.s, c, now)
	}
}

func (d *Detector) endProbe(s *OutlierState, failed bool, now int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.until.Load() == 0 {
		return
	}
	if !failed {
		s.until.Store(0)
		s.probe.Store(false)
		s.failures.Store(0)
		s.restoredAt = now
		s.changed()
		logger.Infof("%s: %s is back after a successful probe", d.name, s.addr)
		return
	}
	c := d.cfg.Load()
	if c == nil || !c.Enabled() {
		// Ejection was turned off meanwhile: let the endpoint back.
		s.until.Store(0)
		s.probe.Store(false)
		s.restoredAt = now
		s.changed()
		return
	}
	d.ejectLocked(s, c, now)
}

// ejectLocked starts the next ejection of s.
func (d *Detector) ejectLocked(s *OutlierState, c *OutlierConfig, now int64) {
	if s.times < 1<<16 {
		s.times++
	}
	period := time.Duration(s.times) * c.BaseEjectionTime
	if period > c.MaxEjectionTime || period <= 0 {
		period = c.MaxEjectionTime
	}
	s.probe.Store(false)
	s.until.Store(now + int64(period))
	s.changed()
	s.ejections.Add(1)
	logger.Infof("%s: ejected %s for %v (ejection %d in a row)", d.name, s.addr, period, s.times)
}

// mayEjectLocked reports whether one more member may be ejected.
func (d *Detector) mayEjectLocked(c *OutlierConfig) bool {
	return d.ejectedLocked() < MaxEjected(len(d.members), c.MaxEjectionPercent)
}

func (d *Detector) ejectedLocked() int {
	n := 0
	for _, m := range d.members {
		if m.Ejected() {
			n++
		}
	}
	return n
}

// ErrNoAdmissible is what a policy's picker returns when none of its
// endpoints is admissible now (OutlierState.Admit refuses them all): the
// caller passes the pick on (to the next locality level, or from a color
// to the base) instead of choosing an ejected endpoint. The cap on
// ejections keeps it from reaching gRPC save when every READY endpoint the
// call may use is ejected or awaits its probe; then the call fails with
// it, a codes.Unavailable status. It is one value: compare with ==.
var ErrNoAdmissible = status.Error(codes.Unavailable, "muster balancer: no admissible endpoint: every READY endpoint the call may use is ejected or awaits its probe")

// MaxEjected returns how many of n endpoints may be ejected at once with
// the given percentage: n*percent/100 rounded down, at least 1 when
// percent > 0, and never all (at most n-1).
func MaxEjected(n, percent int) int {
	if percent <= 0 || n <= 1 {
		return 0
	}
	m := n * percent / 100
	if m < 1 {
		m = 1
	}
	if m > n-1 {
		m = n - 1
	}
	return m
}
