package resolver

import (
	"fmt"
	"testing"

	"github.com/musterhq/muster/registry"
)

func instances(n int) []*registry.Instance {
	out := make([]*registry.Instance, n)
	for i := range out {
		out[i] = &registry.Instance{Name: "big", ID: fmt.Sprintf("instance-%04d", i), Addr: fmt.Sprintf("10.1.%d.%d:80", i/200, i%200)}
	}
	return out
}

func ids(list []*registry.Instance) map[string]bool {
	m := map[string]bool{}
	for _, in := range list {
		m[in.ID] = true
	}
	return m
}

func without(list []*registry.Instance, id string) []*registry.Instance {
	var out []*registry.Instance
	for _, in := range list {
		if in.ID != id {
			out = append(out, in)
		}
	}
	return out
}

func TestSubsetIsStableUnderChurn(t *testing.T) {
	all := instances(1000)
	for c := 0; c < 50; c++ {
		client := fmt.Sprintf("client-%d", c)
		sub := subset(all, client, 25)
		if len(sub) != 25 {
			t.Fatalf("subset of 25 has %d members", len(sub))
		}
		in := ids(sub)
		// Remove an instance outside the subset: nothing changes.
		var outside string
		for _, x := range all {
			if !in[x.ID] {
				outside = x.ID
				break
			}
		}
		if got := ids(subset(without(all, outside), client, 25)); fmt.Sprint(got) != fmt.Sprint(in) {
			t.Fatalf("%s: removing %s (outside) changed the subset", client, outside)
		}
		// Remove one inside: exactly one member is replaced.
		removed := sub[c%25].ID
		after := ids(subset(without(all, removed), client, 25))
		common := 0
		for id := range after {
			if in[id] {
				common++
			}
		}
		if len(after) != 25 || common != 24 || after[removed] {
			t.Fatalf("%s: removing %s (inside) kept %d of 25 members, want 24 plus one new", client, removed, common)
		}
	}
}

func TestSubsetSpreadsClientsEvenly(t *testing.T) {
	all := instances(1000)
	perBackend := map[string]int{}
	const clients, size = 1000, 25
	for c := 0; c < clients; c++ {
		for _, in := range subset(all, fmt.Sprintf("client-%d", c), size) {
			perBackend[in.ID]++
		}
	}
	mean := float64(clients*size) / float64(len(all))
	maxN, minN := 0, clients
	for _, in := range all {
		n := perBackend[in.ID]
		maxN, minN = max(maxN, n), min(minN, n)
	}
	t.Logf("clients per backend: mean %.1f, min %d, max %d (max/mean %.2f)", mean, minN, maxN, float64(maxN)/mean)
	// Rendezvous hashing gives each backend a binomial share
	// (mean 25, sd ~4.9): max/mean stays under 1.8 and nobody is left idle.
	if float64(maxN)/mean > 1.8 {
		t.Fatalf("max/mean clients per backend %.2f, want <= 1.8", float64(maxN)/mean)
	}
	if minN == 0 {
		t.Fatalf("a backend is in no client's subset")
	}
}

func TestSubsetSmallListsAndOrder(t *testing.T) {
	all := instances(10)
	if got := subset(all, "c", 25); len(got) != 10 {
		t.Fatalf("subset larger than the list: %d members", len(got))
	}
	if got := subset(all, "c", 0); len(got) != 10 {
		t.Fatalf("size 0 (off): %d members", len(got))
	}
	sub := subset(instances(100), "c", 10)
	for i := 1; i < len(sub); i++ {
		if sub[i-1].ID >= sub[i].ID {
			t.Fatalf("subset not in ID order: %s before %s", sub[i-1].ID, sub[i].ID)
		}
	}
}

func BenchmarkSubset1000(b *testing.B) {
	all := instances(1000)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		subset(all, "client-7", 25)
	}
}
