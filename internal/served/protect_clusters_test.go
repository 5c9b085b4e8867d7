package served

import (
	"fmt"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// clusterList returns n instances of cluster c, sorted by ID.
func clusterList(c string, n int) []*registry.Instance {
	out := make([]*registry.Instance, n)
	for i := range out {
		out[i] = &registry.Instance{Name: "s", ID: fmt.Sprintf("%s-%03d", c, i), Addr: fmt.Sprintf("%s:%d", c, i+1),
			Metadata: map[string]string{registry.ClusterKey: c}}
	}
	return out
}

// twoClusters is the snapshot of clusters a and b with those lists.
func twoClusters(a, b []*registry.Instance) registry.Snapshot {
	return registry.Snapshot{Loaded: true, Instances: registry.MergeSorted(a, b), Clusters: []registry.ClusterSnapshot{
		{Cluster: "a", Instances: a, Loaded: true}, {Cluster: "b", Instances: b, Loaded: true},
	}}
}

func count(list []*registry.Instance) map[string]int {
	n := map[string]int{}
	for _, in := range list {
		n[registry.ClusterOf(in)]++
	}
	return n
}

// A cluster's mass expiry is withheld while the other cluster's changes
// are served; it is judged against its own size, not the union's.
func TestProtectionPerClusterWithholdsOneClusterOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newProtection(0.5, 30*time.Second)
	a, b := clusterList("a", 100), clusterList("b", 10)
	if got, w := p.decide(t0, twoClusters(a, b)); w || len(got) != 110 {
		t.Fatalf("first: served %d, withheld %v", len(got), w)
	}
	// b loses every instance: 100 of 110 is above the fraction of the
	// union, so only a judgement of b's part on its own withholds it.
	got, w := p.decide(t0.Add(time.Second), twoClusters(a, nil))
	if n := count(got); !w || n["a"] != 100 || n["b"] != 10 {
		t.Fatalf("b expired: served %v, withheld %v; want a's 100 and b's 10 kept", n, w)
	}
	// a's changes pass meanwhile.
	a2 := clusterList("a", 101)
	got, w = p.decide(t0.Add(2*time.Second), twoClusters(a2, nil))
	if n := count(got); !w || n["a"] != 101 || n["b"] != 10 {
		t.Fatalf("a grew while b is withheld: served %v, withheld %v; want a's 101, b's 10", n, w)
	}
	a3 := a2[:60]
	got, w = p.decide(t0.Add(3*time.Second), twoClusters(a3, nil))
	if n := count(got); !w || n["a"] != 60 || n["b"] != 10 {
		t.Fatalf("a shrank within the fraction while b is withheld: served %v, withheld %v; want a's 60, b's 10", n, w)
	}
	if len(p.held) != 1 || p.held[0] != "b" {
		t.Fatalf("held = %v, want [b]", p.held)
	}
	if since := p.since(); !since.Equal(t0.Add(time.Second)) {
		t.Fatalf("since = %v, want b's protection start %v", since, t0.Add(time.Second))
	}
	at, ok := p.next()
	if !ok || at.After(t0.Add(time.Second+30*time.Second+time.Nanosecond)) {
		t.Fatalf("next = %v, %v; want b's lift no later than a window after it began", at, ok)
	}
	got, w = p.decide(at, twoClusters(a3, nil))
	if n := count(got); w || n["a"] != 60 || n["b"] != 0 {
		t.Fatalf("at the lift: served %v, withheld %v; want a's 60 and b empty", n, w)
	}
	if _, ok := p.next(); ok {
		t.Fatal("next reports a lift after protection lifted")
	}
}

// The whole-list protector, given the same sequence, misses b's expiry
// (masked by a's size) and would hold back a's changes during an expiry
// of its own: what per-cluster judgement is for.
func TestProtectionWholeListWouldMaskAndHoldBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	whole := protector{fraction: 0.5, window: 30 * time.Second}
	a, b := clusterList("a", 100), clusterList("b", 10)
	whole.decide(t0, registry.MergeSorted(a, b))
	if _, w := whole.decide(t0.Add(time.Second), a); w {
		t.Fatal("the whole-list protector withheld b's expiry; the per-cluster test above would prove nothing")
	}
	p := newProtection(0.5, 30*time.Second)
	a, b = clusterList("a", 10), clusterList("b", 100)
	p.decide(t0, twoClusters(a, b))
	// b expires; a's instance 0 leaves and a new one joins.
	a2 := append(clusterList("a", 11)[1:], nil...)
	got, w := p.decide(t0.Add(time.Second), twoClusters(a2, nil))
	if n := count(got); !w || n["a"] != 10 || n["b"] != 100 || got[0].ID != "a-001" {
		t.Fatalf("served %v from %s, withheld %v; want a's new list beside b's kept 100", n, got[0].ID, w)
	}
}

// A part not loaded yet is not judged: its first list is served as it
// comes; a part's list served while another is withheld keeps the same
// slice while nothing changes (the target's states recognise it).
func TestProtectionPerClusterLateClusterAndStableList(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newProtection(0.5, 30*time.Second)
	a, b := clusterList("a", 10), clusterList("b", 10)
	late := twoClusters(a, nil)
	late.Clusters[1].Loaded = false
	if got, w := p.decide(t0, late); w || len(got) != 10 {
		t.Fatalf("b not loaded: served %d, withheld %v", len(got), w)
	}
	if got, w := p.decide(t0.Add(time.Second), twoClusters(a, b)); w || len(got) != 20 {
		t.Fatalf("b joined: served %d, withheld %v", len(got), w)
	}
	first, w := p.decide(t0.Add(2*time.Second), twoClusters(a, nil))
	if !w || len(first) != 20 {
		t.Fatalf("b expired: served %d, withheld %v", len(first), w)
	}
	again, _ := p.decide(t0.Add(3*time.Second), twoClusters(a, nil))
	if !sameList(first, again) {
		t.Fatal("the same parts served twice gave two slices")
	}
	if p.kept() != 20 {
		t.Fatalf("kept = %d, want 20", p.kept())
	}
}

// A snapshot without Clusters is judged whole, exactly as before.
func TestProtectionWithoutClustersIsTheWholeList(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newProtection(0.5, 30*time.Second)
	p.decide(t0, registry.Snapshot{Loaded: true, Instances: list(10)})
	if got, w := p.decide(t0.Add(time.Second), registry.Snapshot{Loaded: true}); !w || len(got) != 10 {
		t.Fatalf("served %d, withheld %v; want the 10 kept", len(got), w)
	}
	if p.parts != nil {
		t.Fatal("a snapshot without Clusters made per-cluster protectors")
	}
}
