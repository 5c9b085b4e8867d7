package served

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

func list(n int) []*registry.Instance {
	out := make([]*registry.Instance, n)
	for i := range out {
		out[i] = &registry.Instance{Name: "s", ID: fmt.Sprint(i), Addr: fmt.Sprintf("h:%d", i+1)}
	}
	return out
}

func TestProtectorWithholdsADropBelowTheFraction(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &protector{fraction: 0.5, window: 30 * time.Second}
	if got, prot := p.decide(t0, list(10)); len(got) != 10 || prot {
		t.Fatalf("first list: served %d, protected %v", len(got), prot)
	}
	if got, prot := p.decide(t0.Add(time.Second), list(0)); len(got) != 10 || !prot {
		t.Fatalf("drop to empty: served %d, protected %v; want the 10 kept", len(got), prot)
	}
	if got, prot := p.decide(t0.Add(2*time.Second), list(10)); len(got) != 10 || prot {
		t.Fatalf("recovery: served %d, protected %v", len(got), prot)
	}
}

func TestProtectorJudgesATrickleOverTheWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &protector{fraction: 0.5, window: 30 * time.Second}
	p.decide(t0, list(5000))
	served := 5000
	// etcd expires ~1000 leases a second: one update per second.
	for i, n := range []int{4000, 3000, 2000, 1000, 0} {
		got, _ := p.decide(t0.Add(time.Duration(i+1)*time.Second), list(n))
		served = len(got)
	}
	if served < 2500 {
		t.Fatalf("after a trickle of expiries %d instances are served, want at least half of 5000", served)
	}
}

func TestProtectorLiftsAfterTheWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &protector{fraction: 0.5, window: 30 * time.Second}
	p.decide(t0, list(10))
	// Stable for an hour: the reference is still the list being served.
	if _, prot := p.decide(t0.Add(time.Hour), list(2)); !prot {
		t.Fatalf("a drop after a long stable period was not protected")
	}
	if _, prot := p.decide(t0.Add(time.Hour+10*time.Second), list(2)); !prot {
		t.Fatalf("protection lifted inside the window")
	}
	if got, prot := p.decide(t0.Add(time.Hour+31*time.Second), list(2)); prot || len(got) != 2 {
		t.Fatalf("a window after protection started: served %d, protected %v; want the 2 live instances", len(got), prot)
	}
}

func TestProtectorDisabled(t *testing.T) {
	p := &protector{fraction: 0, window: time.Minute}
	p.decide(time.Unix(0, 0), list(10))
	if got, prot := p.decide(time.Unix(1, 0), nil); prot || len(got) != 0 {
		t.Fatalf("fraction 0 still protects: served %d", len(got))
	}
}

// The reference is the largest size remembered within the window, as a
// scan of the whole history finds it, and the protector keeps only the
// sizes that can still be that maximum: each update costs O(1) however
// many updates the window holds.
func TestProtectorReferenceIsTheWindowMaximum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := &protector{fraction: 0.5, window: 10 * time.Second}
	var history []servedSize
	now, asked := time.Unix(1000, 0), time.Unix(1000, 0)
	for i := 0; i < 5000; i++ {
		now = now.Add(time.Duration(rng.IntN(500)) * time.Millisecond)
		s := servedSize{n: rng.IntN(100), end: now}
		p.remember(s)
		history = append(history, s)
		if at := now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond); at.After(asked) {
			asked = at
		}
		want := 0
		for _, h := range history {
			if !h.end.Before(asked.Add(-p.window)) {
				want = max(want, h.n)
			}
		}
		if got := p.reference(asked); got != want {
			t.Fatalf("update %d: reference %d, want %d (the largest of the window)", i, got, want)
		}
		if len(p.past) > 100 {
			t.Fatalf("update %d: %d sizes kept; at most 100 distinct sizes can be a maximum", i, len(p.past))
		}
	}
	// Through decide: an hour-long window of 10,000 updates keeps no more
	// sizes than there are distinct ones.
	g := &protector{fraction: 0.5, window: time.Hour}
	for i := 0; i < 10000; i++ {
		g.decide(time.Unix(int64(i), 0), list(i%500+1))
	}
	if len(g.past) > 500 {
		t.Fatalf("%d sizes kept after 10,000 updates of at most 500 distinct sizes", len(g.past))
	}
}
