package watchloop

import "testing"

func TestHistoryDetectsRewinds(t *testing.T) {
	type step struct {
		cluster  uint64
		rev      int64
		checkRev bool
		rewind   bool
		gen      uint64
	}
	var h history
	for i, s := range []step{
		{cluster: 7, rev: 10, checkRev: true, gen: 1},                // first load
		{cluster: 7, rev: 12, checkRev: true, gen: 1},                // forward
		{cluster: 7, rev: 12, checkRev: true, gen: 1},                // same revision (a watch from R)
		{cluster: 7, rev: 5, checkRev: false, gen: 1},                // a lagging creation response
		{cluster: 7, rev: 11, checkRev: true, rewind: true, gen: 2},  // backwards: restored
		{cluster: 7, rev: 11, checkRev: true, gen: 2},                // the new history goes on
		{cluster: 9, rev: 40, checkRev: false, rewind: true, gen: 3}, // another cluster, even ahead
		{cluster: 9, rev: 41, checkRev: true, gen: 3},
	} {
		rw, got := h.observe(s.cluster, s.rev, s.checkRev)
		h.loaded()
		if got != s.rewind || h.gen != s.gen {
			t.Fatalf("step %d %+v: rewind %v (%+v), generation %d", i, s, got, rw, h.gen)
		}
		if got && (rw.NewCluster != s.cluster || rw.NewRev != s.rev) {
			t.Fatalf("step %d: rewind %+v does not describe the new history", i, rw)
		}
	}
}
