package served

import (
	"context"
	"fmt"

	"github.com/musterhq/muster/registry"
)

// feed delivers a target's snapshots to its followers: one Discovery
// watcher and one goroutine per target (service and filters) of a
// Pipeline, however many followers serve it. On each change the goroutine
// reads the snapshot once and, for each follower in turn, decides what the
// follower serves (its own empty-list protection and holds) and hands it
// the target's shared list, as one goroutine feeding many channels with
// gRPC's manual resolver would: no goroutine is woken per follower, no
// lock is contended.
//
// A follower's own goroutine keeps what is the follower's alone: its first
// list, the first-state timeout, the lift timer and the settings. Both
// goroutines act on the follower under its lock, each reading the snapshot
// current at that moment, so the follower always ends with the latest one.
type feed struct {
	sh     *sharedStates
	t      *targetStates
	w      registry.Watcher
	cancel context.CancelFunc
	done   chan struct{}
}

// startFeed opens the target's watcher and starts its goroutine.
func startFeed(p *Pipeline, sh *sharedStates, t *targetStates, service string) (*feed, error) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := p.d.Watch(ctx, service)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch %s: %w", service, err)
	}
	f := &feed{sh: sh, t: t, w: w, cancel: cancel, done: make(chan struct{})}
	go f.run(ctx)
	return f, nil
}

func (f *feed) run(ctx context.Context) {
	defer close(f.done)
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-f.w.Updates():
			if !ok {
				return
			}
			for _, r := range f.sh.channels(f.t) {
				r.updateFromFeed()
			}
		}
	}
}

// stop ends the goroutine and closes the watcher.
func (f *feed) stop() {
	f.cancel()
	_ = f.w.Close()
	<-f.done
}
