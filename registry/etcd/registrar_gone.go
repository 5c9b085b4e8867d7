package etcd

// A Deregister returns once its key is gone: no longer in written (deleted
// under the lease, or the lease forgotten: the old lease's keys go with
// it) and no transaction in flight. A transaction that etcd did not answer
// may still have been applied: its keys deregistered meanwhile are kept in
// written (mayHaveLanded), so they get a deletion their Deregisters wait
// for. It waits on a channel of its own key, closed when
// that becomes true, and on the alarms (Close, a failed attempt, the first
// success after failures), not on every change of the registrar's state:
// with 10,000 Deregisters waiting, each deleting transaction wakes only the
// callers of its keys, instead of all of them on every write and every
// status update (O(n²) wake-ups). The channel is closed wherever written
// loses a key (unwriteLocked, forgetWrittenLocked) and where a key's last
// transaction in flight lands (landed).

// goneSignal is the channel the Deregisters of one key wait on. It is in
// Registrar.gone while someone waits on it and until it is closed.
type goneSignal struct {
	ch      chan struct{}
	waiters int // the Deregisters that joined it and have not left
}

// goneWait is one Deregister's wait for its key.
type goneWait struct {
	key string
	sig *goneSignal // the signal joined last; nil before the first wait
}

// goneLocked reports whether key is gone: not written under the lease, and
// no transaction in flight that writes it. r.mu must be held.
func (r *Registrar) goneLocked(key string) bool {
	_, written := r.written[key]
	return !written && r.inflight[key] == 0
}

// goneChanLocked returns the channel closed when w's key may be gone, joining
// the key's signal (shared with the other Deregisters of the key) unless w
// waits on it already. r.mu must be held.
func (r *Registrar) goneChanLocked(w *goneWait) <-chan struct{} {
	if w.sig != nil && r.gone[w.key] == w.sig {
		return w.sig.ch
	}
	sig, ok := r.gone[w.key]
	if !ok {
		sig = &goneSignal{ch: make(chan struct{})}
		r.gone[w.key] = sig
	}
	sig.waiters++
	w.sig = sig
	return sig.ch
}

// leaveGone ends w's wait: the key's signal is dropped with its last
// waiter, so a Deregister whose ctx ended leaves nothing behind.
func (r *Registrar) leaveGone(w *goneWait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.sig == nil || r.gone[w.key] != w.sig {
		return // never joined, or closed (and dropped) already
	}
	if w.sig.waiters--; w.sig.waiters == 0 {
		delete(r.gone, w.key)
	}
}

// signalGoneLocked wakes the Deregisters of key if it is gone. Called
// wherever written loses a key or a key's last transaction in flight
// lands. r.mu must be held.
func (r *Registrar) signalGoneLocked(key string) {
	sig, ok := r.gone[key]
	if !ok || !r.goneLocked(key) {
		return
	}
	close(sig.ch)
	delete(r.gone, key)
}

// unwriteLocked records that key is no longer written under the lease
// (deleted, or found missing and to be written again) and wakes its
// Deregisters if nothing in flight writes it. r.mu must be held.
func (r *Registrar) unwriteLocked(key string) {
	delete(r.written, key)
	r.syncKeyLocked(key)
	r.signalGoneLocked(key)
}
