package wrr

// maxPeriod bounds the length of a precomputed sequence.
const maxPeriod = 1 << 14

// sequence returns one period of nginx's smooth weighted round robin over
// weights (all > 0): the index picked at each step. The weights are first
// divided by their greatest common divisor and, if they still sum to more
// than maxPeriod, scaled down proportionally (each kept at least 1).
//
// nginx's loop costs O(n) per step. Endpoints of equal weight are always
// picked in turn, in index order, so this tracks one candidate per distinct
// weight instead: O(period × distinct weights), with exactly nginx's
// result, ties included.
func sequence(weights []int) []uint32 {
	ws := reduce(weights)
	var total int64
	for _, w := range ws {
		total += w
	}
	type group struct {
		w       int64
		members []uint32 // ascending indices
		picks   int64
	}
	var groups []group
	byWeight := map[int64]int{}
	for i, w := range ws {
		g, ok := byWeight[w]
		if !ok {
			g = len(groups)
			byWeight[w] = g
			groups = append(groups, group{w: w})
		}
		groups[g].members = append(groups[g].members, uint32(i))
	}
	seq := make([]uint32, 0, total)
	for t := int64(1); t <= total; t++ {
		// An endpoint's current weight after step t's increase is
		// t×w − total×(its picks so far).
		best, bestIdx, bestCur := -1, uint32(0), int64(0)
		for gi := range groups {
			g := &groups[gi]
			k := int64(len(g.members))
			idx := g.members[g.picks%k]
			cur := t*g.w - total*(g.picks/k)
			if best < 0 || cur > bestCur || cur == bestCur && idx < bestIdx {
				best, bestIdx, bestCur = gi, idx, cur
			}
		}
		groups[best].picks++
		seq = append(seq, bestIdx)
	}
	return seq
}

// reduce divides the weights by their greatest common divisor and scales
// them down to sum to about maxPeriod when they sum to more.
func reduce(weights []int) []int64 {
	ws := make([]int64, len(weights))
	var g, total int64
	for i, w := range weights {
		ws[i] = int64(max(w, 1))
		g = gcd(g, ws[i])
		total += ws[i]
	}
	total /= g
	for i := range ws {
		ws[i] /= g
	}
	if total <= maxPeriod {
		return ws
	}
	g = 0
	for i := range ws {
		ws[i] = max(1, ws[i]*maxPeriod/total)
		g = gcd(g, ws[i])
	}
	for i := range ws {
		ws[i] /= g
	}
	return ws
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
