package etcd

import "iter"

// keyset is the Registrar's bookkeeping of its keys: what is desired, what
// the run loop wrote under the current lease, the work list between the
// two, the transactions in flight, and the Deregisters waiting for a key to
// be gone (registrar_gone.go). It owns one invariant, kept by every method
// that changes it:
//
//   - toWrite holds exactly the keys of entries whose entry is not the one
//     in written, and toDelete exactly the keys in written but not in
//     entries: the run loop's work list, so that a Register costs O(1)
//     however many instances the registrar holds;
//   - the signal of a key in gone is closed (and dropped) as soon as the
//     key is gone: not in written and no transaction in flight writes it.
//
// A keyset does no I/O and takes no lock: Registrar.mu guards it.
type keyset struct {
	// entries is the desired set, by key. An entry is replaced, never
	// modified, so a pointer identifies one version of a value.
	entries map[string]*entry
	// written holds what the run loop wrote under the current lease, by
	// key. A key in written but not in entries is still to be deleted.
	written map[string]*entry
	// toWrite and toDelete are the keys where entries and written differ:
	// in entries (to write) and not (to delete).
	toWrite, toDelete map[string]struct{}
	// inflight counts, per key, the transactions in flight that write it:
	// a Deregister waits for them, so that its key is not written after it
	// returned.
	inflight map[string]int
	// gone holds, by key, the signal the waiting Deregisters of the key
	// wait on.
	gone map[string]*goneSignal
	// wroteAt is the revision of the last write of each key, so that a
	// deletion older than it (a watch replaying events) is not repaired.
	wroteAt map[string]int64
}

func newKeyset() keyset {
	return keyset{
		entries:  make(map[string]*entry),
		written:  make(map[string]*entry),
		toWrite:  make(map[string]struct{}),
		toDelete: make(map[string]struct{}),
		inflight: make(map[string]int),
		gone:     make(map[string]*goneSignal),
		wroteAt:  make(map[string]int64),
	}
}

// wanted returns the desired entry of key, nil if none.
func (ks *keyset) wanted(key string) *entry { return ks.entries[key] }

// isWritten reports whether e is the entry written under the lease at its
// key.
func (ks *keyset) isWritten(e *entry) bool { return ks.written[e.key] == e }

// len returns the number of desired entries.
func (ks *keyset) len() int { return len(ks.entries) }

// pending returns the number of desired entries not written under the
// lease.
func (ks *keyset) pending() int { return len(ks.toWrite) }

// want makes e the desired entry of its key and returns the one it
// replaces, nil if none.
func (ks *keyset) want(e *entry) (replaced *entry) {
	replaced = ks.entries[e.key]
	ks.entries[e.key] = e
	ks.sync(e.key)
	return replaced
}

// unwant removes key from the desired set and returns its entry, nil if
// none.
func (ks *keyset) unwant(key string) *entry {
	e, ok := ks.entries[key]
	if !ok {
		return nil
	}
	delete(ks.entries, key)
	ks.sync(key)
	return e
}

// wrote records that e was written under the lease at revision rev, even
// if it is no longer desired (then its key is to be deleted).
func (ks *keyset) wrote(e *entry, rev int64) {
	e.confirmed = true
	ks.written[e.key] = e
	ks.wroteAt[e.key] = rev
	ks.sync(e.key)
}

// mayHaveWritten records e as written if its key is neither desired nor
// written: a transaction etcd did not answer may have written it, and the
// key then gets a deletion guarded by the lease.
func (ks *keyset) mayHaveWritten(e *entry) {
	if _, wanted := ks.entries[e.key]; !wanted && ks.written[e.key] == nil {
		ks.written[e.key] = e
		ks.sync(e.key)
	}
}

// unwrite records that key is no longer written under the lease (deleted,
// or found missing and to be written again) and wakes its Deregisters if
// nothing in flight writes it.
func (ks *keyset) unwrite(key string) {
	delete(ks.written, key)
	ks.sync(key)
	ks.signalGone(key)
}

// forgetWritten records that nothing is written under a live lease any
// more: every desired key is to be written again, and every waiting
// Deregister whose key has no transaction in flight is woken.
func (ks *keyset) forgetWritten() {
	ks.written = make(map[string]*entry)
	ks.toDelete = make(map[string]struct{})
	ks.toWrite = make(map[string]struct{}, len(ks.entries))
	for k := range ks.entries {
		ks.toWrite[k] = struct{}{}
	}
	for k := range ks.gone {
		ks.signalGone(k)
	}
}

// begin records a transaction in flight that writes key.
func (ks *keyset) begin(key string) { ks.inflight[key]++ }

// land ends a transaction in flight that writes key, written or not, and
// wakes the Deregisters of key if it is gone.
func (ks *keyset) land(key string) {
	if ks.inflight[key]--; ks.inflight[key] <= 0 {
		delete(ks.inflight, key)
		ks.signalGone(key)
	}
}

// toWriteEntries returns the desired entries not written under the lease.
func (ks *keyset) toWriteEntries() []*entry {
	out := make([]*entry, 0, len(ks.toWrite))
	for k := range ks.toWrite {
		out = append(out, ks.entries[k])
	}
	return out
}

// removals returns the keys written under the lease and no longer desired,
// each with the entry written there.
func (ks *keyset) removals() []removal {
	var out []removal
	for k := range ks.toDelete {
		e := ks.written[k]
		out = append(out, removal{key: k, written: e, confirmed: e != nil && e.confirmed})
	}
	return out
}

// current yields the keys written under the lease whose written entry is
// still the desired one, with that entry. The loop's body may unwrite the
// key it is given.
func (ks *keyset) current() iter.Seq2[string, *entry] {
	return func(yield func(string, *entry) bool) {
		for key, e := range ks.written {
			if ks.entries[key] != e {
				continue // being replaced or deleted anyway
			}
			if !yield(key, e) {
				return
			}
		}
	}
}

// repairable reports whether a deletion of key seen at revision rev
// deleted what the run loop wrote there and still wants as written: not a
// deletion older than the last write (a watch replaying events).
func (ks *keyset) repairable(key string, rev int64) bool {
	e, ok := ks.written[key]
	return ok && ks.entries[key] == e && rev >= ks.wroteAt[key]
}

// writtenKeys yields the keys written under the lease, desired or not.
func (ks *keyset) writtenKeys() iter.Seq[string] {
	return func(yield func(string) bool) {
		for key := range ks.written {
			if !yield(key) {
				return
			}
		}
	}
}

// sync restores the invariant of toWrite and toDelete for key after
// entries or written changed.
func (ks *keyset) sync(key string) {
	delete(ks.toWrite, key)
	delete(ks.toDelete, key)
	e, wanted := ks.entries[key]
	switch {
	case e == ks.written[key]:
	case wanted:
		ks.toWrite[key] = struct{}{}
	default:
		ks.toDelete[key] = struct{}{}
	}
}
