package etcd

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkInvariant fails t unless ks keeps the invariant its doc comment
// states: toWrite and toDelete are exactly where entries and written
// differ, and no signal is left for a key that is gone.
func checkInvariant(t *testing.T, ks *keyset, step string) {
	t.Helper()
	for k, e := range ks.entries {
		_, listed := ks.toWrite[k]
		if want := ks.written[k] != e; listed != want {
			t.Fatalf("%s: key %s in toWrite = %v, want %v (desired %p, written %p)", step, k, listed, want, e, ks.written[k])
		}
	}
	for k := range ks.toWrite {
		if _, ok := ks.entries[k]; !ok {
			t.Fatalf("%s: key %s in toWrite but not desired", step, k)
		}
	}
	for k := range ks.written {
		_, listed := ks.toDelete[k]
		_, wanted := ks.entries[k]
		if listed == wanted {
			t.Fatalf("%s: key %s in toDelete = %v, desired = %v", step, k, listed, wanted)
		}
	}
	for k := range ks.toDelete {
		if _, ok := ks.written[k]; !ok {
			t.Fatalf("%s: key %s in toDelete but not written", step, k)
		}
	}
	if ks.pending() != len(ks.toWrite) || ks.len() != len(ks.entries) {
		t.Fatalf("%s: pending %d, len %d; want %d, %d", step, ks.pending(), ks.len(), len(ks.toWrite), len(ks.entries))
	}
	for k, sig := range ks.gone {
		if ks.isGone(k) {
			t.Fatalf("%s: key %s is gone but its signal is still waiting", step, k)
		}
		select {
		case <-sig.ch:
			t.Fatalf("%s: key %s has a closed signal still listed", step, k)
		default:
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestKeysetWantWriteDelete(t *testing.T) {
	ks := newKeyset()
	a1 := &entry{key: "a", val: []byte("1")}
	if ks.want(a1) != nil || ks.pending() != 1 || ks.wanted("a") != a1 {
		t.Fatalf("want a: pending %d, wanted %p; want 1, %p", ks.pending(), ks.wanted("a"), a1)
	}
	checkInvariant(t, &ks, "want a")
	ks.wrote(a1, 10)
	checkInvariant(t, &ks, "wrote a")
	if ks.pending() != 0 || !ks.isWritten(a1) || len(ks.removals()) != 0 {
		t.Fatalf("after writing a: pending %d, written %v, removals %v", ks.pending(), ks.isWritten(a1), ks.removals())
	}
	a2 := &entry{key: "a", val: []byte("2")}
	if got := ks.want(a2); got != a1 {
		t.Fatalf("want a again replaced %p, want %p", got, a1)
	}
	checkInvariant(t, &ks, "replace a")
	if got := ks.toWriteEntries(); len(got) != 1 || got[0] != a2 {
		t.Fatalf("to write after replacing a: %v, want the new entry", got)
	}
	for key := range ks.current() {
		t.Fatalf("current yields %s while its written entry is being replaced", key)
	}
	if got := ks.unwant("a"); got != a2 {
		t.Fatalf("unwant a returned %p, want %p", got, a2)
	}
	checkInvariant(t, &ks, "unwant a")
	if got := ks.removals(); len(got) != 1 || got[0].key != "a" || got[0].written != a1 {
		t.Fatalf("removals %v, want a with the entry written there", got)
	}
	if ks.unwant("a") != nil {
		t.Fatal("unwant of a key not desired returned an entry")
	}
	// The old entry lands after the key was unwanted: still to delete.
	ks.wrote(a2, 11)
	checkInvariant(t, &ks, "wrote a2 after unwant")
	if len(ks.removals()) != 1 {
		t.Fatalf("removals %v, want a", ks.removals())
	}
	ks.unwrite("a")
	checkInvariant(t, &ks, "unwrite a")
	if len(ks.removals()) != 0 || ks.pending() != 0 {
		t.Fatalf("after the deletion: removals %v, pending %d", ks.removals(), ks.pending())
	}
}

func TestKeysetMayHaveWritten(t *testing.T) {
	ks := newKeyset()
	b := &entry{key: "b"}
	ks.mayHaveWritten(b) // neither desired nor written: gets a deletion
	checkInvariant(t, &ks, "mayHaveWritten b")
	if got := ks.removals(); len(got) != 1 || got[0].written != b {
		t.Fatalf("removals %v, want b", got)
	}
	c1, c2 := &entry{key: "c"}, &entry{key: "c"}
	ks.want(c1)
	ks.mayHaveWritten(c2) // desired: no change
	checkInvariant(t, &ks, "mayHaveWritten c while desired")
	if ks.written["c"] != nil {
		t.Fatal("an entry that may have landed was recorded over a desired key")
	}
	ks.wrote(c1, 5)
	ks.unwant("c")
	ks.mayHaveWritten(c2) // written already: no change
	if ks.written["c"] != c1 {
		t.Fatal("an entry that may have landed replaced the one written")
	}
	checkInvariant(t, &ks, "mayHaveWritten c while written")
}

func TestKeysetRepairableAndCurrent(t *testing.T) {
	ks := newKeyset()
	a, b := &entry{key: "a"}, &entry{key: "b"}
	ks.want(a)
	ks.want(b)
	ks.wrote(a, 10)
	ks.wrote(b, 12)
	if ks.repairable("a", 9) || !ks.repairable("a", 10) || !ks.repairable("a", 11) {
		t.Fatal("a deletion before the last write must not be repaired; one at or after it must")
	}
	if ks.repairable("x", 100) {
		t.Fatal("a key never written is not repairable")
	}
	var seen []string
	for key := range ks.current() {
		seen = append(seen, key)
		ks.unwrite(key) // found missing: to write again
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"a", "b"}) || ks.pending() != 2 {
		t.Fatalf("current yielded %v with pending %d after unwriting each; want a, b and 2", seen, ks.pending())
	}
	checkInvariant(t, &ks, "unwrite in current")
	ks.wrote(a, 20)
	ks.unwant("a")
	if ks.repairable("a", 30) {
		t.Fatal("a deletion of a key no longer desired is not repaired")
	}
	keys := slices.Collect(ks.writtenKeys())
	if !slices.Equal(keys, []string{"a"}) {
		t.Fatalf("written keys %v, want a", keys)
	}
}

func TestKeysetGoneSignals(t *testing.T) {
	ks := newKeyset()
	a := &entry{key: "a"}
	ks.want(a)
	ks.begin("a")
	ks.begin("a")
	ks.wrote(a, 1)
	ks.unwant("a")
	w1, w2 := &goneWait{key: "a"}, &goneWait{key: "a"}
	ch1, ch2 := ks.goneChan(w1), ks.goneChan(w2)
	if ch1 != ch2 || ks.goneChan(w1) != ch1 || ks.gone["a"].waiters != 2 {
		t.Fatalf("two Deregisters of a key share one signal, joined once each (waiters %d)", ks.gone["a"].waiters)
	}
	ks.unwrite("a") // deleted, but two transactions still in flight
	checkInvariant(t, &ks, "unwrite with transactions in flight")
	if isClosed(ch1) {
		t.Fatal("the signal closed while transactions writing the key were in flight")
	}
	ks.land("a")
	if isClosed(ch1) {
		t.Fatal("the signal closed before the last transaction landed")
	}
	ks.land("a")
	if !isClosed(ch1) || ks.gone["a"] != nil {
		t.Fatal("the signal did not close (and drop) when the last transaction landed")
	}
	checkInvariant(t, &ks, "last land")

	// A wait left by its last waiter leaves nothing behind.
	b := &entry{key: "b"}
	ks.want(b)
	ks.wrote(b, 2)
	w3 := &goneWait{key: "b"}
	ks.goneChan(w3)
	ks.leave(w3)
	ks.leave(w3)
	if len(ks.gone) != 0 {
		t.Fatalf("gone %v after the only waiter left, want empty", ks.gone)
	}

	// Forgetting the lease wakes every waiting key with nothing in
	// flight, and makes every desired key pending.
	c := &entry{key: "c"}
	ks.want(c)
	ks.wrote(c, 3)
	ks.begin("c")
	wb, wc := &goneWait{key: "b"}, &goneWait{key: "c"}
	chb, chc := ks.goneChan(wb), ks.goneChan(wc)
	ks.forgetWritten()
	checkInvariant(t, &ks, "forgetWritten")
	if !isClosed(chb) || isClosed(chc) {
		t.Fatalf("after forgetting the lease: b woken %v (want true), c woken %v (want false: in flight)", isClosed(chb), isClosed(chc))
	}
	if ks.pending() != 2 {
		t.Fatalf("pending %d after forgetting the lease, want 2 (b and c)", ks.pending())
	}
	ks.land("c")
	if !isClosed(chc) {
		t.Fatal("c not woken when its transaction landed")
	}
	checkInvariant(t, &ks, "land c")
}

// Random sequences of every operation on a few keys keep the invariant
// after each step.
func TestKeysetRandomSequences(t *testing.T) {
	keys := []string{"a", "b", "c"}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		ks := newKeyset()
		var waits []*goneWait
		rev := int64(0)
		for step := range 200 {
			key := keys[rng.IntN(len(keys))]
			var op string
			switch rng.IntN(9) {
			case 0, 1:
				op = "want"
				ks.want(&entry{key: key})
			case 2:
				op = "unwant"
				ks.unwant(key)
			case 3:
				op = "wrote"
				rev++
				if e := ks.wanted(key); e != nil && rng.IntN(4) > 0 {
					ks.wrote(e, rev)
				} else {
					ks.wrote(&entry{key: key}, rev)
				}
			case 4:
				op = "mayHaveWritten"
				ks.mayHaveWritten(&entry{key: key})
			case 5:
				op = "unwrite"
				ks.unwrite(key)
			case 6:
				op = "begin/land"
				if ks.inflight[key] > 0 && rng.IntN(2) == 0 {
					ks.land(key)
				} else {
					ks.begin(key)
				}
			case 7:
				op = "wait"
				if !ks.isGone(key) {
					w := &goneWait{key: key}
					ks.goneChan(w)
					waits = append(waits, w)
				}
			case 8:
				op = "forgetWritten or leave"
				if len(waits) > 0 && rng.IntN(2) == 0 {
					i := rng.IntN(len(waits))
					ks.leave(waits[i])
					waits = slices.Delete(waits, i, i+1)
				} else {
					ks.forgetWritten()
				}
			}
			checkInvariant(t, &ks, fmt.Sprintf("seed %d, step %d, %s %s", seed, step, op, key))
		}
	}
}
