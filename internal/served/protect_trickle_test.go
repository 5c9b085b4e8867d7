package served

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A mass expiry as etcd delivers it: 100,000 keys deleted one watch
// response at a time, 1,000 a second, for 100 s (more than three windows).
// The served list never falls below the fraction of the size before the
// trickle, and protection lifts a window after the last loss.
func TestProtectorHoldsThroughATrickleLongerThanTheWindow(t *testing.T) {
	const total = 100_000
	base := list(total)
	t0 := time.Unix(1000, 0)
	p := &protector{fraction: 0.5, window: 30 * time.Second}
	p.decide(t0, base)
	now := t0
	for n := total - 1; n >= 0; n-- {
		now = now.Add(time.Millisecond)
		got, _ := p.decide(now, base[:n])
		if float64(len(got)) < p.fraction*total {
			t.Fatalf("%v into the trickle (%d live): %d served, below %v of %d",
				now.Sub(t0), n, len(got), p.fraction, total)
		}
		if at, ok := p.next(); ok && !at.After(now.Add(p.window)) {
			t.Fatalf("%v into the trickle: next %v is within a window of the last loss", now.Sub(t0), at.Sub(t0))
		}
	}
	at, ok := p.next()
	if want := now.Add(p.window + time.Nanosecond); !ok || !at.Equal(want) {
		t.Fatalf("after the trickle next = %v, %v; want %v (a window after the last loss)", at.Sub(t0), ok, want.Sub(t0))
	}
	if got, prot := clone(p).decide(at.Add(-time.Nanosecond), nil); !prot || len(got) < total/2 {
		t.Fatalf("just before next: served %d, protected %v", len(got), prot)
	}
	if got, prot := p.decide(at, nil); prot || len(got) != 0 {
		t.Fatalf("at next: served %d, protected %v; want the empty live list", len(got), prot)
	}
}

// model is the protector's rule written out over the whole history, with
// no queue, no pruning and no search: the protector must decide as it does
// and say next when its decision would change.
type model struct {
	fraction float64
	window   time.Duration
	lives    []sample // every live list decided on
	served   []span   // every accepted list and when it was served
	withheld bool
}

type sample struct {
	at time.Time
	n  int
}

type span struct {
	n          int
	start, end time.Time // end zero while served; protection start once withheld
}

// runStart returns the start of the run of losses in progress at t,
// scanning the live sizes (t not before the last of them).
func (m *model) runStart(t time.Time) (time.Time, bool) {
	var start, last time.Time
	for i := 1; i < len(m.lives); i++ {
		cur, prev := m.lives[i], m.lives[i-1]
		switch {
		case cur.n < prev.n:
			if start.IsZero() || cur.at.After(last.Add(m.window)) {
				start = cur.at
			}
			last = cur.at
		case cur.n > prev.n:
			start = time.Time{}
		}
	}
	if start.IsZero() || t.After(last.Add(m.window)) {
		return time.Time{}, false
	}
	return start, true
}

func (m *model) reference(t time.Time) int {
	from := t.Add(-m.window)
	if s, ok := m.runStart(t); ok {
		from = s.Add(-m.window)
	}
	ref := 0
	for _, s := range m.served {
		if s.end.IsZero() || !s.end.Before(from) {
			ref = max(ref, s.n)
		}
	}
	return ref
}

func (m *model) decide(t time.Time, n int) (served int, withheld bool) {
	m.lives = append(m.lives, sample{t, n})
	if len(m.served) > 0 && m.fraction > 0 && float64(n) < m.fraction*float64(m.reference(t)) {
		cur := &m.served[len(m.served)-1]
		if !m.withheld {
			cur.end = t
		}
		m.withheld = true
		return cur.n, true
	}
	if k := len(m.served); k > 0 && !m.withheld {
		m.served[k-1].end = t
	}
	m.served = append(m.served, span{n: n, start: t})
	m.withheld = false
	return n, false
}

func TestProtectorMatchesTheModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	base := list(60)
	for _, fraction := range []float64{0.3, 0.5, 1} {
		p := &protector{fraction: fraction, window: 10 * time.Second}
		m := &model{fraction: fraction, window: 10 * time.Second}
		now := time.Unix(1000, 0)
		for i := 0; i < 3000; i++ {
			now = now.Add(time.Duration(rng.IntN(6000)) * time.Millisecond)
			n := rng.IntN(60)
			if rng.IntN(3) > 0 && i > 0 {
				n = max(0, m.lives[len(m.lives)-1].n-rng.IntN(8)) // mostly losses: runs
			}
			got, prot := p.decide(now, base[:n])
			want, mprot := m.decide(now, n)
			if len(got) != want || prot != mprot {
				t.Fatalf("fraction %v, update %d (%d live at %v): served %d protected %v; the model serves %d protected %v",
					fraction, i, n, now, len(got), prot, want, mprot)
			}
			at, ok := p.next()
			if ok != prot {
				t.Fatalf("fraction %v, update %d: next ok %v while protected %v", fraction, i, ok, prot)
			}
			if !ok {
				continue
			}
			// The model withholds up to next and serves at it.
			for _, probe := range []time.Time{at.Add(-time.Nanosecond), at} {
				c := *m
				c.lives = append([]sample(nil), m.lives...)
				c.served = append([]span(nil), m.served...)
				_, mprot := c.decide(probe, n)
				if wantProt := probe.Before(at); mprot != wantProt {
					t.Fatalf("fraction %v, update %d: at %v (next %v) the model protects %v", fraction, i, probe, at, mprot)
				}
			}
		}
	}
}
