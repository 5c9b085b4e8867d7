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
// loses a key (keyset.unwrite, keyset.forgetWritten) and where a key's last
// transaction in flight lands (keyset.land). Close keeps written as it
// is (its keys stay in etcd until the revocation lands): a Deregister woken
// by Close's alarm, however late it runs, returns ErrClosed for a key still
// held, never success.

// goneSignal is the channel the Deregisters of one key wait on. It is in
// keyset.gone while someone waits on it and until it is closed.
type goneSignal struct {
	ch      chan struct{}
	waiters int // the Deregisters that joined it and have not left
}

// goneWait is one Deregister's wait for its key.
type goneWait struct {
	key string
	sig *goneSignal // the signal joined last; nil before the first wait
}

// isGone reports whether key is gone: not written under the lease, and no
// transaction in flight that writes it.
func (ks *keyset) isGone(key string) bool {
	_, written := ks.written[key]
	return !written && ks.inflight[key] == 0
}

// goneChan returns the channel closed when w's key may be gone, joining
// the key's signal (shared with the other Deregisters of the key) unless w
// waits on it already.
func (ks *keyset) goneChan(w *goneWait) <-chan struct{} {
	if w.sig != nil && ks.gone[w.key] == w.sig {
		return w.sig.ch
	}
	sig, ok := ks.gone[w.key]
	if !ok {
		sig = &goneSignal{ch: make(chan struct{})}
		ks.gone[w.key] = sig
	}
	sig.waiters++
	w.sig = sig
	return sig.ch
}

// leave ends w's wait: the key's signal is dropped with its last waiter,
// so a Deregister whose ctx ended leaves nothing behind.
func (ks *keyset) leave(w *goneWait) {
	if w.sig == nil || ks.gone[w.key] != w.sig {
		return // never joined, or closed (and dropped) already
	}
	if w.sig.waiters--; w.sig.waiters == 0 {
		delete(ks.gone, w.key)
	}
}

// signalGone wakes the Deregisters of key if it is gone. Called wherever
// written loses a key or a key's last transaction in flight lands.
func (ks *keyset) signalGone(key string) {
	sig, ok := ks.gone[key]
	if !ok || !ks.isGone(key) {
		return
	}
	close(sig.ch)
	delete(ks.gone, key)
}
