package resolver

import (
	"slices"

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
	base := fnv64a(offset64, clientID)
	base = fnv64a(base, "\x00")
	all := make([]scored, len(list))
	for i, in := range list {
		all[i] = scored{score: mix64(fnv64a(base, in.ID)), index: i}
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

const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

// fnv64a continues an FNV-1a hash over s.
func fnv64a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime64
	}
	return h
}

// mix64 is MurmurHash3's 64-bit finalizer: it spreads FNV's weak low bits
// over the whole word, so scores of similar IDs are independent.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
