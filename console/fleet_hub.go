package console

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// fleetHub follows the fleet once for every open services page: while at
// least one page's stream is subscribed, one goroutine lists the services
// every WithRelistInterval, watches each one, and publishes the page's
// state; the streams send it on.
type fleetHub struct {
	s      *Server
	memory *fleetMemory // what each run leaves the next

	mu     sync.Mutex
	subs   map[chan struct{}]struct{}
	state  fleetState
	run    int                // numbers the runs; a run publishes only while it is the current one
	stop   context.CancelFunc // ends the current run; nil when none runs
	closed bool               // no run starts after close
	runs   sync.WaitGroup
}

// fleetState is what a run last published.
type fleetState struct {
	// data is the page's state as JSON; nil before the first.
	data []byte
	rev  int64
	// ready is false while some service is still loading (and etcd
	// answers): the counts are not known yet.
	ready bool
	stale bool
}

func newFleetHub(s *Server) *fleetHub {
	return &fleetHub{s: s, memory: newFleetMemory(), subs: map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that receives a value (without blocking the
// hub: it holds at most one) after each change of the state, and the
// function that ends the subscription. The first subscriber starts a run,
// the last to leave ends it.
func (h *fleetHub) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[ch] = struct{}{}
	if h.stop == nil && !h.closed {
		ctx, cancel := context.WithCancel(h.s.ctx)
		h.run++
		h.stop, h.state = cancel, fleetState{}
		h.runs.Add(1)
		go h.follow(ctx, h.run)
	}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs, ch)
		if len(h.subs) == 0 && h.stop != nil {
			h.stop()
			h.stop = nil
		}
	}
}

// current is the state last published.
func (h *fleetHub) current() fleetState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// publish makes st the current state, if run is the current run, and
// tells the subscribers.
func (h *fleetHub) publish(run int, st fleetState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if run != h.run {
		return
	}
	h.state = st
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// follow is one run: it follows every service until ctx ends.
func (h *fleetHub) follow(ctx context.Context, run int) {
	defer h.runs.Done()
	f := newFleet(h.s, h.memory)
	defer f.close()
	relist := time.NewTicker(h.s.opts.relist)
	defer relist.Stop()
	f.startListing(ctx)
	for {
		// Until a listing has ended the page would show no service:
		// nothing is published.
		if f.listedOnce() {
			v, rev, loading := f.view(time.Now())
			if data, err := json.Marshal(v); err == nil {
				h.publish(run, fleetState{data: data, rev: rev, ready: !loading || v.Stale, stale: v.Stale})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-f.notify:
		case r := <-f.listed:
			f.applyListing(ctx, r)
		case <-relist.C:
			f.startListing(ctx)
		}
	}
}

// close ends the current run, if any, waits for it, and starts no other.
func (h *fleetHub) close() {
	h.mu.Lock()
	h.closed = true
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
	h.mu.Unlock()
	h.runs.Wait()
}
