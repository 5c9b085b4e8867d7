package resolver

import (
	"time"

	"github.com/musterhq/muster/registry"
)

// protector implements empty-list protection for one channel.
//
// A list is accepted unless it is smaller than fraction times the reference
// size; then the last accepted list keeps being served. The reference is the
// largest list served at any moment of the last window, so a loss that
// arrives as a trickle of deletes (etcd expires leases at a bounded rate) is
// judged against the size before the trickle, not the previous update. A
// list kept by protection stops counting toward the reference from the
// moment protection starts, so protection lifts by itself once a window has
// passed: a service that really shrank is served as it is after that.
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
}

type servedSize struct {
	n   int
	end time.Time // when it stopped being served
}

// decide returns the list to serve for the live list and whether
// protection withheld the live list.
func (p *protector) decide(now time.Time, live []*registry.Instance) ([]*registry.Instance, bool) {
	p.decidedAt = now
	if p.fraction > 0 && p.good != nil {
		ref := p.reference(now)
		if float64(len(live)) < p.fraction*float64(ref) {
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

// remember adds the size of a list that stopped being served.
func (p *protector) remember(s servedSize) {
	i := len(p.past)
	for i > 0 && p.past[i-1].n <= s.n {
		i--
	}
	p.past = append(p.past[:i], s)
}

// reference is the largest list size served within the window before now.
func (p *protector) reference(now time.Time) int {
	from := now.Add(-p.window)
	drop := 0
	for drop < len(p.past) && p.past[drop].end.Before(from) {
		drop++
	}
	if drop > 0 {
		p.past = append(p.past[:0], p.past[drop:]...)
	}
	ref := 0
	if p.goodSince.IsZero() || !p.goodSince.Before(from) {
		ref = len(p.good)
	}
	if len(p.past) > 0 {
		ref = max(ref, p.past[0].n)
	}
	return ref
}

// since returns when the current protection started, or the zero time
// while the live list is served.
func (p *protector) since() time.Time { return p.goodSince }

// next returns the earliest time at which decide, given the list it last
// withheld, would serve that list: the first moment a size leaves the
// window and leaves a reference small enough. ok is false while not
// protecting. It is never later than a window after protection started,
// when the withheld-for list stops counting. It changes nothing.
func (p *protector) next() (at time.Time, ok bool) {
	if p.goodSince.IsZero() {
		return time.Time{}, false
	}
	// The reference only falls as time passes, one step each time a size
	// leaves the window: a past size a window after its end (past is in
	// increasing end order), the withheld-for list a window after
	// protection started. A size leaves just after (not at) that time.
	lifts := func(t time.Time) bool {
		return t.After(p.decidedAt) && float64(p.withheld) >= p.fraction*float64(p.referenceAt(t))
	}
	for _, s := range p.past {
		if t := s.end.Add(p.window + time.Nanosecond); lifts(t) {
			return t, true
		}
	}
	// No size outlives this one (past sizes ended before protection
	// started), so the reference is 0 after it.
	t := p.goodSince.Add(p.window + time.Nanosecond)
	if !t.After(p.decidedAt) {
		// Cannot happen while protecting; never ask for a decision at
		// once, which would be asked again and again.
		t = p.decidedAt.Add(p.window)
	}
	return t, true
}

// referenceAt is the reference at t (not before the last decide) as
// reference would compute it, without dropping anything.
func (p *protector) referenceAt(t time.Time) int {
	from := t.Add(-p.window)
	ref := 0
	if p.goodSince.IsZero() || !p.goodSince.Before(from) {
		ref = len(p.good)
	}
	// Sizes decrease and ends increase along past: the first one still in
	// the window is the largest in it.
	for _, s := range p.past {
		if !s.end.Before(from) {
			ref = max(ref, s.n)
			break
		}
	}
	return ref
}
