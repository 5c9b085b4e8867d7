package served

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
	base := hash.FNV64a(hash.Offset64, clientID)
	base = hash.FNV64a(base, "\x00")
	// The size best-ranked instances seen so far, in a heap whose root is
	// the worst of them: one pass over the list, O(n log size), instead
	// of sorting every score.
	top := make(rankHeap, 0, size)
	for i, in := range list {
		s := scored{score: hash.Mix64(hash.FNV64a(base, in.ID)), index: i}
		switch {
		case len(top) < size:
			top.push(s)
		case top[0].below(s):
			top[0] = s
			top.down(0)
		}
	}
	chosen := make([]int, size)
	for i, s := range top {
		chosen[i] = s.index
	}
	slices.Sort(chosen)
	out := make([]*registry.Instance, size)
	for i, idx := range chosen {
		out[i] = list[idx]
	}
	return out
}

// scored is an instance's rendezvous score and its index in the list.
type scored struct {
	score uint64
	index int
}

// below reports whether s ranks below o: a lower score, or the same
// score and a later index.
func (s scored) below(o scored) bool {
	if s.score != o.score {
		return s.score < o.score
	}
	return s.index > o.index
}

// rankHeap is a binary heap of scores whose root ranks lowest.
type rankHeap []scored

// push adds s.
func (h *rankHeap) push(s scored) {
	*h = append(*h, s)
	a := *h
	for i := len(a) - 1; i > 0; {
		parent := (i - 1) / 2
		if !a[i].below(a[parent]) {
			break
		}
		a[i], a[parent] = a[parent], a[i]
		i = parent
	}
}

// down restores the heap after a[i] rose in rank.
func (h rankHeap) down(i int) {
	for {
		low := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h) && h[c].below(h[low]) {
				low = c
			}
		}
		if low == i {
			return
		}
		h[i], h[low] = h[low], h[i]
		i = low
	}
}
