package served

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A real shrink followed by silence: with no further list, next says when
// decide would serve the withheld list, a window after protection started.
func TestProtectorLiftsOnAQuietRegistry(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &protector{fraction: 0.5, window: 30 * time.Second}
	if _, ok := p.next(); ok {
		t.Fatalf("next before any list: a lift is scheduled")
	}
	p.decide(t0, list(10))
	if _, ok := p.next(); ok {
		t.Fatalf("next while serving the live list: a lift is scheduled")
	}
	start := t0.Add(time.Hour)
	if _, prot := p.decide(start, list(2)); !prot {
		t.Fatalf("10 -> 2 not protected")
	}
	at, ok := p.next()
	if want := start.Add(30*time.Second + time.Nanosecond); !ok || !at.Equal(want) {
		t.Fatalf("next = %v, %v; want %v (just after a window from the start of protection)", at, ok, want)
	}
	if !p.since().Equal(start) {
		t.Fatalf("since = %v, want %v", p.since(), start)
	}
	if got, prot := clone(p).decide(at.Add(-time.Nanosecond), list(2)); !prot || len(got) != 10 {
		t.Fatalf("just before next: served %d, protected %v; want the 10 kept", len(got), prot)
	}
	if got, prot := p.decide(at, list(2)); prot || len(got) != 2 {
		t.Fatalf("at next: served %d, protected %v; want the 2 live instances", len(got), prot)
	}
	if _, ok := p.next(); ok {
		t.Fatalf("next after the lift: a lift is scheduled")
	}
}

// The reference can fall before the withheld-for list leaves the window,
// when a larger list that ended earlier leaves it after a growth ended the
// run of losses: next finds that moment.
func TestProtectorNextWhenALargerPastListLeaves(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &protector{fraction: 0.5, window: 30 * time.Second}
	p.decide(t0, list(100))
	p.decide(t0.Add(time.Second), list(60)) // 60 >= 50: served; 100 ended at t0+1s
	if _, prot := p.decide(t0.Add(2*time.Second), list(40)); !prot {
		t.Fatalf("40 of a reference of 100 not protected")
	}
	at, ok := p.next()
	if want := t0.Add(32*time.Second + time.Nanosecond); !ok || !at.Equal(want) {
		t.Fatalf("next during a run of losses = %v, %v; want %v (a window after the last loss)", at, ok, want)
	}
	// A growth ends the run: the window is no longer held.
	if _, prot := p.decide(t0.Add(3*time.Second), list(45)); !prot {
		t.Fatalf("45 of a reference of 100 not protected")
	}
	at, ok = p.next()
	if want := t0.Add(31*time.Second + time.Nanosecond); !ok || !at.Equal(want) {
		t.Fatalf("next = %v, %v; want %v (when the 100 leaves the window, 45 >= 60/2)", at, ok, want)
	}
	if got, prot := clone(p).decide(at.Add(-time.Nanosecond), list(45)); !prot || len(got) != 60 {
		t.Fatalf("just before next: served %d, protected %v; want the 60 kept", len(got), prot)
	}
	if got, prot := p.decide(at, list(45)); prot || len(got) != 45 {
		t.Fatalf("at next: served %d, protected %v; want the 45", len(got), prot)
	}
}

// Against the protector itself over random histories: whenever it
// withholds, next is after now, no later than a window after the later of
// the start of protection and the last loss, decide with the same list
// still withholds just before it and serves the list at it.
func TestProtectorNextIsWhenTheDecisionChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, fraction := range []float64{0.3, 0.5, 0.9, 1} {
		p := &protector{fraction: fraction, window: 10 * time.Second}
		now := time.Unix(1000, 0)
		checked := 0
		for i := 0; i < 20000; i++ {
			now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
			live := list(rng.IntN(40))
			_, withheld := p.decide(now, live)
			at, ok := p.next()
			if ok != withheld {
				t.Fatalf("fraction %v, update %d: withheld %v but next ok %v", fraction, i, withheld, ok)
			}
			if !ok {
				continue
			}
			checked++
			if !at.After(now) {
				t.Fatalf("fraction %v, update %d: next %v is not after now %v", fraction, i, at, now)
			}
			last := p.since()
			if p.lastLoss.After(last) {
				last = p.lastLoss
			}
			if limit := last.Add(p.window + time.Nanosecond); at.After(limit) {
				t.Fatalf("fraction %v, update %d: next %v is later than a window after protection started or the last loss (%v)", fraction, i, at, limit)
			}
			if _, prot := clone(p).decide(at.Add(-time.Nanosecond), live); !prot {
				t.Fatalf("fraction %v, update %d: the list is served before next (%v)", fraction, i, at)
			}
			if _, prot := clone(p).decide(at, live); prot {
				t.Fatalf("fraction %v, update %d: still withheld at next (%v)", fraction, i, at)
			}
		}
		if checked < 1000 {
			t.Fatalf("fraction %v: only %d protected updates checked", fraction, checked)
		}
	}
}

// clone copies p, and its past, which decide may rewrite in place.
func clone(p *protector) *protector {
	c := *p
	c.past = slices.Clone(p.past)
	return &c
}
