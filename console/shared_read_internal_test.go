package console

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The pages of one state of a service that ask at once share one read,
// also when the page that started it leaves; a page that leaves stops
// waiting; another state, or none, reads again. Without the sharing each
// of the ten pages reads.
func TestSharedReadsOneReadPerState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r sharedReads[int]
		var reads atomic.Int32
		release := make(chan struct{})
		read := func(ctx context.Context) (int, error) {
			n := reads.Add(1)
			select {
			case <-release:
				return int(n), nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		key := stateKey{service: "payments", generation: 1, revision: 7}
		base := t.Context()
		first, leave := context.WithCancel(t.Context())
		gone, goneLeaves := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		got := make([]int, 10)
		errs := make([]error, 10)
		for i := range 10 {
			ctx := t.Context()
			switch i {
			case 0:
				ctx = first
			case 9:
				ctx = gone
			}
			wg.Go(func() { got[i], errs[i] = r.do(ctx, base, key, time.Minute, read) })
			synctest.Wait() // the first starts the read, the others join it
		}
		leave()      // the page that started the read leaves: the read goes on
		goneLeaves() // another stops waiting
		synctest.Wait()
		close(release)
		wg.Wait()
		if n := reads.Load(); n != 1 {
			t.Fatalf("%d reads for ten pages of one state, want 1", n)
		}
		for i := range 9 {
			if got[i] != 1 || errs[i] != nil {
				t.Errorf("page %d: %d, %v; want the shared read's 1", i, got[i], errs[i])
			}
		}
		if !errors.Is(errs[9], context.Canceled) {
			t.Errorf("page that left: %v, want context.Canceled", errs[9])
		}
		// A new state, and no state, read again.
		for _, k := range []stateKey{{service: "payments", generation: 1, revision: 8}, {service: "payments"}} {
			if v, err := r.do(t.Context(), base, k, time.Minute, read); err != nil || v != int(reads.Load()) {
				t.Errorf("%+v: %d, %v, want a read of its own", k, v, err)
			}
		}
		if n := reads.Load(); n != 3 {
			t.Errorf("%d reads, want 3", n)
		}
	})
}
