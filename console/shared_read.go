package console

import (
	"context"
	"sync"
	"time"
)

// sharedReads runs one read for the event streams that need it for the
// same state of a service at once: every page of a service learns of a
// change together, and each would read the same overrides. A read is
// shared only among callers of one state (the snapshot's generation and
// revision), so that it starts after each of them saw that state and
// reflects it or a later one: only what that state holds (the overrides,
// keys under the service's prefix) may be read so.
type sharedReads[T any] struct {
	mu      sync.Mutex
	flights map[stateKey]*flight[T] // the reads running
}

// stateKey names one state of one service; a zero revision names none
// (nothing is shared).
type stateKey struct {
	service    string
	generation uint64
	revision   int64
}

// flight is one read running; done closes when v and err are set.
type flight[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// do returns what read returns, running it once for the callers that ask
// for key while it runs (every caller when key names no state). The read
// runs on base (the console's lifetime), bounded by timeout, so that one
// page leaving fails no other; a caller whose ctx ends stops waiting.
func (r *sharedReads[T]) do(ctx, base context.Context, key stateKey, timeout time.Duration, read func(context.Context) (T, error)) (T, error) {
	if key.revision == 0 {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return read(ctx)
	}
	r.mu.Lock()
	if f, ok := r.flights[key]; ok {
		r.mu.Unlock()
		select {
		case <-f.done:
			return f.v, f.err
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
	f := &flight[T]{done: make(chan struct{})}
	if r.flights == nil {
		r.flights = map[stateKey]*flight[T]{}
	}
	r.flights[key] = f
	r.mu.Unlock()
	rctx, cancel := context.WithTimeout(base, timeout)
	f.v, f.err = read(rctx)
	cancel()
	r.mu.Lock()
	delete(r.flights, key)
	r.mu.Unlock()
	close(f.done)
	return f.v, f.err
}
