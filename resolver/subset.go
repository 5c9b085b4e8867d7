package resolver

import (
	"slices"

	"github.com/musterhq/muster/internal/hash"
	"github.com/musterhq/muster/registry"
)

// subset picks the size instances of list with the highest rendezvous
// (highest-random-weight) score for clientID, returned in list's order.
//
// Each instance's score is a hash of the client ID and the instance ID, so
// the choice depends on nothing else: removing an instance outside the
// subset changes nothing, removing one inside replaces exactly that one (by
// the next-highest score), and clients with different IDs spread evenly
// over the instances. list must be sorted by ID; it is not modified.
func subset(list []*registry.Instance, clientID string, size int) []*registry.Instance {
	if size <= 0 || len(list) <= size {
		return list
	}
	type scored struct {
		score uint64
		index int
	}
	base := hash.FNV64a(hash.Offset64, clientID)
	base = hash.FNV64a(base, "\x00")
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
