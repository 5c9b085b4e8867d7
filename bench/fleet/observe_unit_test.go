package fleet_test

import (
	"testing"
	"time"
)

// The view reports nothing until its first full list, then each change.
func TestViewReportsChangesAfterTheFirstFullList(t *testing.T) {
	v := &view{expect: 2}
	if d, ready := v.update(map[string]int{"a": 1}); ready || len(d) != 0 {
		t.Fatalf("partial list: diffs %v, ready %v", d, ready)
	}
	if d, ready := v.update(map[string]int{"a": 1, "b": 1}); !ready || len(d) != 0 {
		t.Fatalf("full list: diffs %v, ready %v", d, ready)
	}
	d, _ := v.update(map[string]int{"a": 0, "c": 10})
	want := map[diff]bool{{"a", 0}: true, {"b", absent}: true, {"c", 10}: true}
	if len(d) != len(want) {
		t.Fatalf("diffs %v, want %v", d, want)
	}
	for _, x := range d {
		if !want[x] {
			t.Fatalf("diffs %v, want %v", d, want)
		}
	}
}

// A view that skips states shows later changes; the earlier ones of the
// same instance count as shown then, and a change is timed per tier.
func TestMatcherTimesEachChangeAtTheViewThatShowsIt(t *testing.T) {
	m := newMatcher()
	m.observe("m0", observer{tierMuster, "s", anyRegion})
	m.observe("n0", observer{tierNaming, "s", 0})
	m.observe("n1", observer{tierNaming, "s", 1}) // sees none of region 0's changes
	t0 := time.Unix(100, 0)
	for i, c := range []*change{
		{kind: kindRegister, service: "s", addr: "a", want: rollWeight},
		{kind: kindWeight, service: "s", addr: "a", want: changedWeight},
		{kind: kindDrain, service: "s", addr: "a", want: 0},
		{kind: kindDeregister, service: "s", addr: "a", want: absent},
	} {
		c.at = t0.Add(time.Duration(i) * time.Second)
		m.made(c)
	}
	if n := m.skipped[tierNaming]; n != 2 {
		t.Fatalf("etcd-naming skipped %d changes, want 2 (weight and drain)", n)
	}
	m.saw("m0", diff{"a", rollWeight}, t0.Add(500*time.Millisecond))
	m.saw("m0", diff{"a", 7}, t0.Add(5*time.Second)) // matches nothing
	m.saw("m0", diff{"a", 0}, t0.Add(2500*time.Millisecond))
	if got := m.latencies(tierMuster, kindWeight); len(got) != 1 || got[0] != 1500*time.Millisecond {
		t.Fatalf("weight, passed over by the drain: %v, want [1.5s]", got)
	}
	if out := m.outstanding(); out[tierMuster] != 1 || out[tierNaming] != 2 {
		t.Fatalf("outstanding %v, want muster 1 (deregister), etcd-naming 2", out)
	}
	m.saw("n0", diff{"a", absent}, t0.Add(3200*time.Millisecond))
	if got := m.latencies(tierNaming); len(got) != 2 || got[0] != 200*time.Millisecond || got[1] != 3200*time.Millisecond {
		t.Fatalf("etcd-naming: %v, want [200ms 3.2s]", got)
	}
}
