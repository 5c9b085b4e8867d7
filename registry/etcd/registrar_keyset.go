package etcd

import "iter"

// entry is one value of an instance's key, with its copies. An entry is
// replaced, never rewritten, so a pointer identifies one version of a
// value; its other fields are the run loop's bookkeeping of that version.
type entry struct {
	key string
	val []byte
	// mirrors are the entry's copies in other layouts (WithMirror),
	// written and deleted with it.
	mirrors []mirrored
	// err is set when etcd refused the entry for good; it is then removed
	// from the desired set.
	err error
	// confirmed is set once etcd answered a transaction that wrote the
	// entry (keyset.wrote): a removal of an entry only maybe written (an
	// unanswered put) is deleted without first being written Draining.
	confirmed bool
	// unanswered is set when a transaction that wrote the entry went
	// unanswered (keyset.unanswered): etcd may have applied it.
	unanswered bool
	// rev is the revision of the entry's last write, so that a deletion
	// older than it (a watch replaying events) is not repaired.
	rev int64
}

// keyset is the run loop's bookkeeping of its keys: what is desired, what
// it wrote under the current lease, and the work list between the two. It
// owns one invariant, kept by every method that changes it: toWrite holds
// exactly the keys of entries whose entry is not the one in written, and
// toDelete exactly the keys in written but not in entries, so that a
// Register costs O(1) however many instances the registrar holds.
//
// A keyset does no I/O and takes no lock: the run loop owns it.
type keyset struct {
	// entries is the desired set, by key.
	entries map[string]*entry
	// written holds what the run loop wrote under the current lease, by
	// key. A key in written but not in entries is still to be deleted.
	written map[string]*entry
	// toWrite and toDelete are the keys where entries and written differ:
	// in entries (to write) and not (to delete).
	toWrite, toDelete map[string]struct{}
}

func newKeyset() keyset {
	return keyset{
		entries:  make(map[string]*entry),
		written:  make(map[string]*entry),
		toWrite:  make(map[string]struct{}),
		toDelete: make(map[string]struct{}),
	}
}

// wanted returns the desired entry of key, nil if none.
func (ks *keyset) wanted(key string) *entry { return ks.entries[key] }

// isWritten reports whether e is the entry written under the lease at its
// key.
func (ks *keyset) isWritten(e *entry) bool { return ks.written[e.key] == e }

// isGone reports whether key is not written under the lease: what a
// Deregister waits for.
func (ks *keyset) isGone(key string) bool {
	_, written := ks.written[key]
	return !written
}

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
	ks.leaving(replaced)
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
	ks.leaving(e)
	ks.sync(key)
	return e
}

// leaving records e, which leaves the desired set, as written if a
// transaction that wrote it went unanswered and nothing is written at its
// key: it may be in etcd, and the key then gets a deletion guarded by the
// lease (which deletes nothing if the transaction was not applied), or is
// overwritten by its replacement.
func (ks *keyset) leaving(e *entry) {
	if e != nil && e.unanswered && ks.written[e.key] == nil {
		ks.written[e.key] = e
	}
}

// wrote records that e was written under the lease at revision rev.
func (ks *keyset) wrote(e *entry, rev int64) {
	e.confirmed, e.unanswered, e.rev = true, false, rev
	ks.written[e.key] = e
	ks.sync(e.key)
}

// unanswered records that the transaction that wrote es went unanswered:
// each may be in etcd (keyset.leaving).
func (ks *keyset) unanswered(es []*entry) {
	for _, e := range es {
		e.unanswered = true
	}
}

// unwrite records that key is no longer written under the lease (deleted,
// or found missing and to be written again).
func (ks *keyset) unwrite(key string) {
	delete(ks.written, key)
	ks.sync(key)
}

// forgetWritten records that nothing is written under a live lease any
// more: every desired key is to be written again. What an unanswered
// transaction may have written under the old lease goes with it.
func (ks *keyset) forgetWritten() {
	ks.written = make(map[string]*entry)
	ks.toDelete = make(map[string]struct{})
	ks.toWrite = make(map[string]struct{}, len(ks.entries))
	for k, e := range ks.entries {
		e.unanswered = false
		ks.toWrite[k] = struct{}{}
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
	return ok && ks.entries[key] == e && rev >= e.rev
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
