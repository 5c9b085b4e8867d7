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
type protector struct {
	fraction float64
	window   time.Duration

	good      []registry.Instance // last accepted list
	goodSince time.Time           // protection start; zero while not protecting
	past      []servedSize        // earlier accepted lists, newest last
}

type servedSize struct {
	n   int
	end time.Time // when it stopped being served
}

// decide returns the list to serve for the live list and whether
// protection withheld the live list.
func (p *protector) decide(now time.Time, live []registry.Instance) ([]registry.Instance, bool) {
	if p.fraction > 0 && p.good != nil {
		ref := p.reference(now)
		if float64(len(live)) < p.fraction*float64(ref) {
			if p.goodSince.IsZero() {
				p.goodSince = now
			}
			return p.good, true
		}
	}
	if p.good != nil {
		end := now
		if !p.goodSince.IsZero() {
			end = p.goodSince
		}
		p.past = append(p.past, servedSize{n: len(p.good), end: end})
	}
	p.good = live
	p.goodSince = time.Time{}
	return live, false
}

// reference is the largest list size served within the window before now.
func (p *protector) reference(now time.Time) int {
	from := now.Add(-p.window)
	keep := p.past[:0]
	for _, s := range p.past {
		if !s.end.Before(from) {
			keep = append(keep, s)
		}
	}
	p.past = keep
	ref := 0
	if p.goodSince.IsZero() || !p.goodSince.Before(from) {
		ref = len(p.good)
	}
	for _, s := range p.past {
		ref = max(ref, s.n)
	}
	return ref
}
