package etcd

// history tracks which etcd history a service's responses belong to, so
// that a rewind is noticed: etcd restored from an older backup, restarted
// empty, or replaced by another cluster on the same endpoints. Within one
// history the revisions a Discovery reads never go backwards: every load is
// a linearizable Get, and a watch starts at the revision of the load before
// it. A lower revision, or another cluster ID, therefore means another
// history.
//
// A history is plain data, owned by the service's goroutine.
type history struct {
	cluster uint64 // cluster ID of the responses; 0 before the first
	rev     int64  // highest revision seen in this history
	gen     uint64 // the generation published in snapshots; 0 before the first load
}

// rewind describes a change of history.
type rewind struct {
	oldCluster, newCluster uint64
	oldRev, newRev         int64
}

// observe records the header of a response (cluster ID and revision). It
// reports a rewind, and starts a new generation, when the header belongs to
// another history than the responses before it. checkRev is false for a
// response whose revision may lag behind what was seen (the creation
// response of a watch, answered by a member that has not applied the
// revision of the load yet): only its cluster ID is compared.
func (h *history) observe(cluster uint64, rev int64, checkRev bool) (rewind, bool) {
	if h.cluster == 0 {
		h.cluster, h.rev = cluster, rev
		return rewind{}, false
	}
	if cluster == h.cluster && (!checkRev || rev >= h.rev) {
		h.rev = max(h.rev, rev)
		return rewind{}, false
	}
	rw := rewind{oldCluster: h.cluster, newCluster: cluster, oldRev: h.rev, newRev: rev}
	h.cluster, h.rev = cluster, rev
	h.gen++
	return rw, true
}

// loaded records a completed load; the first one starts generation 1.
func (h *history) loaded() {
	if h.gen == 0 {
		h.gen = 1
	}
}
