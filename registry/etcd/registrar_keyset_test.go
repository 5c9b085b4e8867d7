package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// checkInvariant fails t unless ks keeps the invariant its doc comment
// states: toWrite and toDelete are exactly where entries and written
// differ.
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

// A put etcd did not answer may have been applied: an entry it carried
// that leaves the desired set before it is written again gets a deletion
// (or is overwritten by its replacement); one still desired is written
// again; after a lost lease it goes with the old lease.
func TestKeysetUnanswered(t *testing.T) {
	ks := newKeyset()
	b := &entry{key: "b"}
	ks.want(b)
	ks.unanswered([]*entry{b})
	checkInvariant(t, &ks, "unanswered b")
	if got := ks.toWriteEntries(); len(got) != 1 || got[0] != b {
		t.Fatalf("to write after an unanswered put: %v, want b again", got)
	}
	ks.unwant("b")
	checkInvariant(t, &ks, "unwant b after an unanswered put")
	if got := ks.removals(); len(got) != 1 || got[0].written != b || got[0].confirmed {
		t.Fatalf("removals %v, want b, unconfirmed", got)
	}
	if ks.isGone("b") {
		t.Fatal("a key an unanswered put may have written counts as gone")
	}

	c1, c2 := &entry{key: "c"}, &entry{key: "c"}
	ks.want(c1)
	ks.unanswered([]*entry{c1})
	ks.want(c2) // replaced: c2 is written over whatever c1 left
	checkInvariant(t, &ks, "replace c after an unanswered put")
	if ks.written["c"] != c1 || ks.pending() != 1 {
		t.Fatalf("written c %p, pending %d; want c1 and c2 to write", ks.written["c"], ks.pending())
	}

	d1, d2 := &entry{key: "d"}, &entry{key: "d"}
	ks.want(d1)
	ks.wrote(d1, 5)
	ks.want(d2)
	ks.unanswered([]*entry{d2})
	ks.unwant("d") // written already: the written entry stays
	if ks.written["d"] != d1 {
		t.Fatal("an entry that may have landed replaced the one written")
	}
	checkInvariant(t, &ks, "unwant d while written")

	e := &entry{key: "e"}
	ks.want(e)
	ks.unanswered([]*entry{e})
	ks.forgetWritten()
	ks.unwant("e")
	checkInvariant(t, &ks, "unwant e after a lost lease")
	if !ks.isGone("e") {
		t.Fatal("what an unanswered put wrote under a lost lease goes with it, yet e is not gone")
	}
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

// waitingCall returns a call of key, Register of e if e is not nil, whose
// caller waits until ctx ends or until deadline.
func waitingCall(ctx context.Context, key string, e *entry, deadline time.Time) *call {
	c := &call{key: key, e: e, reply: make(chan error, 1), ctx: ctx, deadline: deadline}
	if e != nil {
		c.in = &registry.Instance{}
	}
	return c
}

func send(c *call, err error) { c.reply <- err }

func answered(c *call) (bool, error) {
	select {
	case err := <-c.reply:
		return true, err
	default:
		return false, nil
	}
}

// A key's calls are answered when their outcome is known, each once, and
// the others wait on.
func TestWaitsSettle(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	later := now.Add(time.Hour)
	w := make(waits)
	ks := newKeyset()
	a1 := &entry{key: "a"}
	ks.want(a1)
	reg := waitingCall(ctx, "a", a1, later)
	dereg := waitingCall(ctx, "b", nil, later)
	w.add(reg, now)
	w.add(dereg, now)
	b := &entry{key: "b"}
	ks.want(b)
	ks.wrote(b, 1)
	ks.unwant("b")
	settled := func(c *call) (bool, error) {
		if c.in == nil {
			return ks.isGone(c.key), nil
		}
		if ks.isWritten(c.e) {
			return true, nil
		}
		if ks.wanted(c.key) != c.e {
			return true, c.e.err
		}
		return false, nil
	}
	w.settleAll(settled, send)
	if ok, _ := answered(reg); ok {
		t.Fatal("a Register answered before its entry was written")
	}
	if ok, _ := answered(dereg); ok {
		t.Fatal("a Deregister answered while its key is written")
	}
	ks.wrote(a1, 2)
	w.settle("a", settled, send)
	if ok, err := answered(reg); !ok || err != nil {
		t.Fatalf("Register once written: answered %v, %v; want nil", ok, err)
	}
	if keys, calls := w.len(); keys != 1 || calls != 1 {
		t.Fatalf("%d keys, %d calls waiting; want the Deregister of b alone", keys, calls)
	}
	ks.unwrite("b")
	w.settle("b", settled, send)
	if ok, err := answered(dereg); !ok || err != nil {
		t.Fatalf("Deregister once gone: answered %v, %v; want nil", ok, err)
	}

	// Refused: the Register learns why; Close: everyone left hears it.
	a2 := &entry{key: "a"}
	ks.want(a2)
	refused := waitingCall(ctx, "a", a2, later)
	other := waitingCall(ctx, "c", nil, later)
	w.add(refused, now)
	ks.wrote(&entry{key: "c"}, 3)
	w.add(other, now)
	a2.err = errors.New("refused")
	ks.unwant("a")
	w.settle("a", settled, send)
	if ok, err := answered(refused); !ok || err != a2.err {
		t.Fatalf("refused Register: answered %v, %v; want the refusal", ok, err)
	}
	w.answerAll(registry.ErrClosed, send)
	if ok, err := answered(other); !ok || !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("at Close: answered %v, %v; want ErrClosed", ok, err)
	}
	if keys, calls := w.len(); keys != 0 || calls != 0 {
		t.Fatalf("%d keys, %d calls left after answering all", keys, calls)
	}
}

// Calls whose callers stopped waiting (ctx ended, or the request timeout
// passed) are forgotten when another call of their key arrives, so callers
// that give up on a key that never goes leave nothing behind.
func TestWaitsForgetCallersThatGaveUp(t *testing.T) {
	now := time.Now()
	w := make(waits)
	for i := 0; i < 1000; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		w.add(waitingCall(ctx, "a", nil, now.Add(time.Hour)), now)
	}
	if keys, calls := w.len(); keys != 1 || calls != 1 {
		t.Fatalf("1,000 Deregisters whose ctx ended one after another: %d keys, %d calls kept; want 1, 1", keys, calls)
	}
	live := waitingCall(context.Background(), "a", nil, now.Add(time.Second))
	w.add(live, now)
	w.add(waitingCall(context.Background(), "a", nil, now.Add(time.Hour)), now)
	if _, calls := w.len(); calls != 2 {
		t.Fatalf("%d calls kept, want the two whose callers wait", calls)
	}
	w.add(waitingCall(context.Background(), "a", nil, now.Add(time.Hour)), now.Add(2*time.Second))
	if _, calls := w.len(); calls != 2 {
		t.Fatalf("%d calls kept after a caller's request timeout passed, want 2", calls)
	}
}

// Random sequences of every operation on a few keys keep the invariant
// after each step.
func TestKeysetRandomSequences(t *testing.T) {
	keys := []string{"a", "b", "c"}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		ks := newKeyset()
		rev := int64(0)
		for step := range 200 {
			key := keys[rng.IntN(len(keys))]
			var op string
			switch rng.IntN(7) {
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
				op = "unanswered"
				if e := ks.wanted(key); e != nil {
					ks.unanswered([]*entry{e})
				}
			case 5:
				op = "unwrite"
				ks.unwrite(key)
			case 6:
				op = "forgetWritten"
				ks.forgetWritten()
			}
			checkInvariant(t, &ks, fmt.Sprintf("seed %d, step %d, %s %s", seed, step, op, key))
		}
	}
}
