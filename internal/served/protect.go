package served

import (
	"sort"
	"time"

	"github.com/musterhq/muster/registry"
)

// protector implements empty-list protection for one follower.
//
// A list is accepted unless it is smaller than fraction times the reference
// size; then the last accepted list keeps being served. The reference is the
// largest list served at any moment of the last window, so a loss that
// arrives as a trickle of deletes (etcd expires leases at a bounded rate) is
// judged against the size before the trickle, not the previous update.
//
// A trickle can last longer than the window (etcd revokes about 1,000 leases
// a second, so 50,000 expiring keys take ~50 s): during a run of losses
// (live lists each smaller than the one before, each within a window of the
// previous loss, with no growth in between) the window is held at the one
// before the run began, so the reference stays the size before the run.
// The run ends a window after its last loss, or when a live list grows.
//
// A list kept by protection counts toward the reference while it is in the
// window: a window after protection started, or a window after the last loss
// of the run if that is later. Protection therefore lifts by itself then: a
// service that really shrank is served as it is a window after it stopped
// shrinking.
//
// The protector is pure: it reads no clock (each call is given the time)
// and starts nothing. Its owner asks next when, with no new list, the
// decision would change, and calls decide again then, so that protection
// lifts on a quiet registry too.
type protector struct {
	fraction float64
	window   time.Duration

	good      []*registry.Instance // last accepted list
	goodSince time.Time            // protection start; zero while not protecting
	withheld  int                  // size of the last list withheld, while protecting
	decidedAt time.Time            // time of the last decide
	// past holds the sizes of earlier accepted lists that may still be
	// the largest of the window: strictly decreasing in size and
	// increasing in end time (a list no larger than a later one can never
	// be the maximum again, so it is dropped when the later one is
	// added). The front is the largest; each update costs O(1) amortized
	// however many updates the window holds.
	past []servedSize

	lastLive int       // size of the last live list decided on
	runStart time.Time // first loss of the current run; zero when none
	lastLoss time.Time // last loss of the run
}

type servedSize struct {
	n   int
	end time.Time // when it stopped being served
}

// decide returns the list to serve for the live list and whether
// protection withheld the live list.
func (p *protector) decide(now time.Time, live []*registry.Instance) ([]*registry.Instance, bool) {
	if p.good != nil {
		p.track(now, len(live))
	}
	p.lastLive = len(live)
	p.decidedAt = now
	if p.fraction > 0 && p.good != nil {
		if !p.accepts(len(live), p.reference(now)) {
			if p.goodSince.IsZero() {
				p.goodSince = now
			}
			p.withheld = len(live)
			return p.good, true
		}
	}
	if p.good != nil {
		end := now
		if !p.goodSince.IsZero() {
			end = p.goodSince
		}
		p.remember(servedSize{n: len(p.good), end: end})
	}
	p.good = live
	p.goodSince = time.Time{}
	return live, false
}

// track follows runs of losses: a live list smaller than the previous one
// starts a run, or extends the one in progress; a larger one ends it.
func (p *protector) track(now time.Time, n int) {
	switch {
	case n < p.lastLive:
		if !p.inRun(now) {
			p.runStart = now
		}
		p.lastLoss = now
	case n > p.lastLive:
		p.runStart = time.Time{}
	}
}

// inRun reports whether a run of losses is in progress at t.
func (p *protector) inRun(t time.Time) bool {
	return !p.runStart.IsZero() && !t.After(p.lastLoss.Add(p.window))
}

// accepts reports whether a live list of n instances is served against a
// reference of ref.
func (p *protector) accepts(n, ref int) bool {
	return float64(n) >= p.fraction*float64(ref)
}

// from is the start of the window the reference is taken over at t: the
// window before the run of losses in progress at t, else the window before
// t. It never decreases as t grows, so sizes that left it never return.
func (p *protector) from(t time.Time) time.Time {
	if p.inRun(t) {
		return p.runStart.Add(-p.window)
	}
	return t.Add(-p.window)
}

// remember adds the size of a list that stopped being served.
func (p *protector) remember(s servedSize) {
	i := len(p.past)
	for i > 0 && p.past[i-1].n <= s.n {
		i--
	}
	p.past = append(p.past[:i], s)
}

// reference is the largest list size served within the window that
// applies at now (see from), dropping the sizes that left it.
func (p *protector) reference(now time.Time) int {
	from := p.from(now)
	drop := 0
	for drop < len(p.past) && p.past[drop].end.Before(from) {
		drop++
	}
	if drop > 0 {
		p.past = append(p.past[:0], p.past[drop:]...)
	}
	return p.referenceFrom(from)
}

// referenceFrom is the largest size served at or after from, without
// dropping anything.
func (p *protector) referenceFrom(from time.Time) int {
	ref := 0
	if p.goodSince.IsZero() || !p.goodSince.Before(from) {
		ref = len(p.good)
	}
	// Sizes decrease and ends increase along past: the first one still in
	// the window is the largest in it.
	i := sort.Search(len(p.past), func(i int) bool { return !p.past[i].end.Before(from) })
	if i < len(p.past) {
		ref = max(ref, p.past[i].n)
	}
	return ref
}

// since returns when the current protection started, or the zero time
// while the live list is served.
func (p *protector) since() time.Time { return p.goodSince }

// next returns the earliest time at which decide, given the list it last
// withheld, would serve that list. ok is false while not protecting. It is
// never later than a window after the later of the start of protection and
// the last loss of the run, when the withheld-for list and every earlier
// size have left the window. It changes nothing.
func (p *protector) next() (at time.Time, ok bool) {
	if p.goodSince.IsZero() {
		return time.Time{}, false
	}
	// With no new list, the reference only falls as time passes: not at
	// all while the run of losses in progress at the last decide lasts
	// (the window is held), then one step each time a size leaves the
	// window: a past size a window after its end, the withheld-for list a
	// window after protection started. A size leaves just after (not at)
	// that time. So the answer is the first moment from the end of the
	// run at which the reference is small enough.
	earliest := p.decidedAt.Add(time.Nanosecond)
	if p.inRun(p.decidedAt) {
		earliest = p.lastLoss.Add(p.window + time.Nanosecond)
	}
	leaves := func(end time.Time) time.Time { return end.Add(p.window + time.Nanosecond) }
	if p.accepts(p.withheld, p.referenceFrom(earliest.Add(-p.window))) {
		return earliest, true
	}
	if !p.accepts(p.withheld, len(p.good)) {
		// Past sizes ended before protection started: the reference
		// is 0 once the withheld-for list leaves.
		return leaves(p.goodSince), true
	}
	// The reference is the first past size in the window, once it is no
	// larger than the withheld-for list's: find the first past size
	// small enough; the answer is when the one before it leaves.
	j := sort.Search(len(p.past), func(i int) bool { return p.accepts(p.withheld, p.past[i].n) })
	if j == 0 {
		// Cannot happen: the reference at earliest would accept.
		return earliest, true
	}
	return leaves(p.past[j-1].end), true
}
