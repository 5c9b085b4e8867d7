package served

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

func except(list []*registry.Instance, ids ...string) []*registry.Instance {
	return slices.DeleteFunc(slices.Clone(list), func(in *registry.Instance) bool { return slices.Contains(ids, in.ID) })
}

func TestGraceHoldsAnInstanceThatLeftWhileServing(t *testing.T) {
	g := grace{period: 3 * time.Second}
	t0 := time.Unix(1000, 0)
	all := list(4)
	retired := []string{}
	if out, _ := g.apply(t0, all, all, retired, departed); !sameList(out, all) {
		t.Fatalf("first list served as %v, want the list itself", idsOf(out))
	}
	// Two of four revoked at once: both held, the list unchanged.
	gone := except(all, "1", "2")
	out, ev := g.apply(t0.Add(time.Second), gone, gone, retired, departed)
	if got := idsOf(out); !slices.Equal(got, []string{"0", "1", "2", "3"}) || !slices.Equal(ev.began, []string{"1", "2"}) {
		t.Fatalf("after the deletion: served %v, began %v; want all four, 1 and 2 held", got, ev.began)
	}
	if out[1] != all[1] {
		t.Fatal("a held instance is not served with its last value")
	}
	if at, ok := g.next(); !ok || !at.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("next = %v %v, want the end of the grace", at, ok)
	}
	// 1 comes back (a re-put under a new lease: a new value): the hold ends.
	back := &registry.Instance{Name: "s", ID: "1", Addr: all[1].Addr}
	live := []*registry.Instance{all[0], back, all[3]}
	out, ev = g.apply(t0.Add(1500*time.Millisecond), live, live, retired, departed)
	if got := idsOf(out); !slices.Equal(got, []string{"0", "1", "2", "3"}) || out[1] != back || !slices.Equal(ev.returned, []string{"1"}) {
		t.Fatalf("after 1 came back: served %v, returned %v; want 1's new value and 2 still held", got, ev.returned)
	}
	// 2 never does: it leaves when its grace ends, not before.
	if out, _ = g.apply(t0.Add(4*time.Second-time.Nanosecond), live, live, retired, departed); len(out) != 4 {
		t.Fatalf("2 left before its grace ended: %v", idsOf(out))
	}
	out, ev = g.apply(t0.Add(4*time.Second), live, live, retired, departed)
	if !sameList(out, live) || !slices.Equal(ev.expired, []string{"2"}) {
		t.Fatalf("at the end of the grace: served %v, expired %v; want the live list itself", idsOf(out), ev.expired)
	}
	if _, ok := g.next(); ok {
		t.Fatal("next reports a hold after the last one ended")
	}
}

func TestGraceReleasesADeliberateDeparture(t *testing.T) {
	t0 := time.Unix(1000, 0)
	all := list(3)
	drained := *all[1]
	drained.Draining = true
	for _, tc := range []struct {
		name    string
		before  []*registry.Instance
		retired []string
	}{
		{"drained before it left", []*registry.Instance{all[0], &drained, all[2]}, []string{}},
		{"retired by the registry", all, []string{"x", "1"}},
		{"backend without a record", all, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := grace{period: 3 * time.Second}
			g.apply(t0, tc.before, tc.before, tc.retired, departed)
			live := except(all, "1")
			if out, ev := g.apply(t0.Add(time.Millisecond), live, live, tc.retired, departed); !sameList(out, live) || ev.began != nil {
				t.Fatalf("served %v (began %v), want the live list at once", idsOf(out), ev.began)
			}
		})
	}
	g := grace{}
	g.apply(t0, all, all, []string{}, departed)
	live := except(all, "1")
	if out, _ := g.apply(t0, live, live, []string{}, departed); !sameList(out, live) {
		t.Fatalf("with the grace disabled: served %v, want the live list", idsOf(out))
	}
}

func TestGraceLeavesProtectionAlone(t *testing.T) {
	g := grace{period: 3 * time.Second}
	t0 := time.Unix(1000, 0)
	all := list(4)
	g.apply(t0, all, all, []string{}, departed)
	// Protection withholds a loss of three: it serves the old list, the
	// grace adds nothing.
	live := all[:1]
	if out, _ := g.apply(t0.Add(time.Second), live, all, []string{}, departed); !sameList(out, all) {
		t.Fatalf("served %v, want protection's list itself", idsOf(out))
	}
	// A window later protection lifts, the registry having said nothing
	// more: the grace, long over, does not hold the three again.
	if out, ev := g.apply(t0.Add(time.Minute), live, live, []string{}, departed); !sameList(out, live) || ev.began != nil {
		t.Fatalf("after protection lifted: served %v (began %v), want the live list", idsOf(out), ev.began)
	}
}

// departed matches a plain model (the IDs of prev missing from live) on
// random lists that share some instances by pointer, some by ID only.
func TestDepartedMatchesTheModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	all := list(30)
	for range 500 {
		var prev, live []*registry.Instance
		for _, in := range all {
			if rng.IntN(2) == 0 {
				prev = append(prev, in)
			}
			switch rng.IntN(3) {
			case 0:
				live = append(live, in)
			case 1:
				c := *in // same ID, another pointer: a re-put
				live = append(live, &c)
			}
		}
		slices.SortFunc(prev, compareByID)
		slices.SortFunc(live, compareByID)
		var want []string
		for _, p := range prev {
			if !slices.ContainsFunc(live, func(in *registry.Instance) bool { return in.ID == p.ID }) {
				want = append(want, p.ID)
			}
		}
		if got := idsOf(departed(prev, live)); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("departed(%v, %v) = %v, want %v", idsOf(prev), idsOf(live), got, want)
		}
	}
}

func compareByID(a, b *registry.Instance) int { return strings.Compare(a.ID, b.ID) }
