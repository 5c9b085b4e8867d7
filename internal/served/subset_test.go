package served

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/musterhq/muster/internal/hash"

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

// subsetBySort is the definition subset implements: every score sorted,
// the best size kept (ties: the earlier instance), returned in list order.
func subsetBySort(list []*registry.Instance, clientID string, size int) []*registry.Instance {
	if size <= 0 || len(list) <= size {
		return list
	}
	base := hash.FNV64a(hash.FNV64a(hash.Offset64, clientID), "\x00")
	all := make([]scored, len(list))
	for i, in := range list {
		all[i] = scored{score: hash.Mix64(hash.FNV64a(base, in.ID)), index: i}
	}
	slices.SortFunc(all, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		default:
			return a.index - b.index
		}
	})
	chosen := make([]int, size)
	for i := range chosen {
		chosen[i] = all[i].index
	}
	slices.Sort(chosen)
	out := make([]*registry.Instance, size)
	for i, idx := range chosen {
		out[i] = list[idx]
	}
	return out
}

// The heap selection chooses what sorting every score chooses, for lists
// and subset sizes of every shape, duplicate IDs (equal scores) included.
func TestSubsetMatchesSortingEveryScore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 2000; round++ {
		n := rng.IntN(200)
		list := make([]*registry.Instance, n)
		for i := range list {
			list[i] = &registry.Instance{ID: fmt.Sprintf("i-%d", rng.IntN(n+1))}
		}
		size := rng.IntN(n + 2)
		client := fmt.Sprintf("client-%d", rng.IntN(10))
		got, want := subset(list, client, size), subsetBySort(list, client, size)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: %d instances, size %d: heap chose %v, sorting chose %v", round, n, size, idsOf(got), idsOf(want))
		}
	}
}

// idsOf returns the instances' IDs.
func idsOf(list []*registry.Instance) []string {
	out := make([]string, len(list))
	for i, in := range list {
		out[i] = in.ID
	}
	return out
}
