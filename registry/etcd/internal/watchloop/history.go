package watchloop

// history tracks which etcd history a watched range's responses belong
// to, so that a rewind is noticed: etcd restored from an older backup,
// restarted empty, or replaced by another cluster on the same endpoints.
// Within one history the revisions a Loop reads never go backwards: every
// load is a linearizable Get, and a watch starts at or below the revision of
// the load before it. A lower revision, or another cluster ID, therefore
// means another history.
//
// A history is plain data, owned by the Loop's goroutine.
type history struct {
	cluster uint64 // cluster ID of the responses; 0 before the first
	rev     int64  // highest revision seen in this history
	gen     uint64 // the generation: 0 before the first load, one more per rewind
}

// Rewind describes a change of history: the cluster ID and the highest
// revision of the old one, those of the response that showed the new one,
// and the generation the new history starts.
type Rewind struct {
	OldCluster, NewCluster uint64
	OldRev, NewRev         int64
	Generation             uint64
}

// observe records the header of a response (cluster ID and revision). It
// reports a rewind, and starts a new generation, when the header belongs to
// another history than the responses before it. checkRev is false for a
// response whose revision may lag behind what was seen (the creation
// response of a watch, answered by a member that has not applied the
// revision of the load yet): only its cluster ID is compared.
func (h *history) observe(cluster uint64, rev int64, checkRev bool) (Rewind, bool) {
	if h.cluster == 0 {
		h.cluster, h.rev = cluster, rev
		return Rewind{}, false
	}
	if cluster == h.cluster && (!checkRev || rev >= h.rev) {
		h.rev = max(h.rev, rev)
		return Rewind{}, false
	}
	h.gen++
	rw := Rewind{OldCluster: h.cluster, NewCluster: cluster, OldRev: h.rev, NewRev: rev, Generation: h.gen}
	h.cluster, h.rev = cluster, rev
	return rw, true
}

// loaded records a completed load; the first one starts generation 1.
func (h *history) loaded() {
	if h.gen == 0 {
		h.gen = 1
	}
}
