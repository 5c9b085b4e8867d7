package served

import (
	"reflect"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

func TestQueryFilter(t *testing.T) {
	a := &registry.Instance{ID: "a", Version: "v1", Zone: "z1", Metadata: map[string]string{"color": "blue"}}
	b := &registry.Instance{ID: "b", Version: "v2", Zone: "z1"}
	c := &registry.Instance{ID: "c", Version: "v1", Zone: "z2", Metadata: map[string]string{"color": "green"}}
	all := []*registry.Instance{a, b, c}
	ids := func(l []*registry.Instance) (s []string) {
		for _, in := range l {
			s = append(s, in.ID)
		}
		return s
	}
	d := &registry.Instance{ID: "d", Version: "v1", Region: "r1", Zone: "z3"}
	e := &registry.Instance{ID: "e", Version: "v1", Region: "r2", Zone: "z1"}
	all = append(all, d, e)
	for _, tc := range []struct {
		what     string
		q        Target
		fallback bool
		want     []string
	}{
		{"no filter", Target{}, false, []string{"a", "b", "c", "d", "e"}},
		{"version", Target{Version: "v1"}, false, []string{"a", "c", "d", "e"}},
		{"metadata", Target{Metadata: map[string]string{"color": "blue"}}, false, []string{"a"}},
		{"version and metadata", Target{Version: "v1", Metadata: map[string]string{"color": "green"}}, false, []string{"c"}},
		{"zone", Target{Zone: "z1"}, false, []string{"a", "b", "e"}},
		{"zone in a region", Target{Region: "r1", Zone: "z1"}, false, []string{"a", "b"}},
		{"region", Target{Region: "r1"}, false, []string{"d"}},
		{"zone after version", Target{Version: "v1", Zone: "z2"}, false, []string{"c"}},
		{"empty zone without fallback", Target{Version: "v2", Zone: "z2"}, false, nil},
		{"zone with fallback: all, for the balancer", Target{Zone: "z2"}, true, []string{"a", "b", "c", "d", "e"}},
		{"region with fallback, after version", Target{Version: "v2", Region: "r1"}, true, []string{"b"}},
	} {
		if got := ids(tc.q.filter(all, tc.fallback)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, got, tc.want)
		}
	}
	if got := (Target{Zone: "z1"}).filter(all, true); &got[0] != &all[0] {
		t.Errorf("no filter copied the list; want it shared")
	}
}

// A list of exactly fraction × the reference is served; one fewer is not.
func TestProtectorFractionIsInclusive(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &protector{fraction: 0.5, window: 30 * time.Second}
	p.decide(t0, list(10))
	if got, prot := p.decide(t0.Add(time.Second), list(5)); len(got) != 5 || prot {
		t.Fatalf("5 of 10 at fraction 0.5: served %d, protected %v; want the 5 served", len(got), prot)
	}
	if got, prot := p.decide(t0.Add(2*time.Second), list(4)); len(got) != 5 || !prot {
		t.Fatalf("4 of 10: served %d, protected %v; want the 5 kept", len(got), prot)
	}
}

// A list no longer than the subset size is returned as it is.
func TestSubsetOfASmallEnoughList(t *testing.T) {
	l := []*registry.Instance{{ID: "a"}, {ID: "b"}}
	if got := subset(l, "client", 2); len(got) != 2 || &got[0] != &l[0] {
		t.Fatalf("subset of 2 at size 2 = %v, want the list itself", got)
	}
	if got := subset(l, "client", 0); len(got) != 2 {
		t.Fatalf("subset at size 0 = %v, want the list", got)
	}
	if got := subset(l, "client", 1); len(got) != 1 {
		t.Fatalf("subset of 2 at size 1 = %d instances, want 1", len(got))
	}
}
