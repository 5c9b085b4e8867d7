package clusters

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

// follower follows one service in every cluster with one goroutine and
// publishes the union to the service's hub, shared by all its watchers.
type follower struct {
	hub    *watchhub.Hub
	parts  []registry.Watcher // nil for a cluster whose Watch failed
	failed []error            // of the parts whose Watch failed
	u      *union             // only used by run's goroutine (and before it starts)
	cancel context.CancelFunc
	done   chan struct{}
}

// startFollower starts following service in clusters; it does not block
// (a Discovery's Watch returns at once).
func startFollower(clusters []Cluster, service string, hub *watchhub.Hub, now time.Time) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{
		hub: hub, parts: make([]registry.Watcher, len(clusters)), failed: make([]error, len(clusters)),
		u: newUnion(service, clusters, now), cancel: cancel, done: make(chan struct{}),
	}
	for i, c := range clusters {
		w, err := c.Discovery.Watch(ctx, service)
		if err != nil {
			// Only a closed Discovery refuses a valid name: the
			// cluster's part stays empty and stale.
			f.failed[i] = fmt.Errorf("watch: %w", err)
			continue
		}
		f.parts[i] = w
	}
	f.publish()
	go f.run(ctx)
	return f
}

// run publishes the union again after any cluster's update, until ctx
// ends. A cluster whose channel closes (its Discovery was closed) keeps
// its last snapshot.
func (f *follower) run(ctx context.Context) {
	defer close(f.done)
	cases := make([]reflect.SelectCase, 1+len(f.parts))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	for i, p := range f.parts {
		cases[1+i].Dir = reflect.SelectRecv
		if p != nil {
			cases[1+i].Chan = reflect.ValueOf(p.Updates())
		}
	}
	for {
		i, _, ok := reflect.Select(cases)
		if i == 0 {
			return
		}
		if !ok {
			cases[i].Chan = reflect.Value{} // ignored from now on
		}
		f.publish()
	}
}

// publish merges the clusters' snapshots and hands the union to the hub,
// waking its watchers if a reader would see a difference.
func (f *follower) publish() {
	snaps := make([]registry.Snapshot, len(f.parts))
	for i, p := range f.parts {
		if p == nil {
			snaps[i] = registry.Snapshot{StaleSince: f.u.started, Err: f.failed[i]}
			continue
		}
		snaps[i] = p.Snapshot()
	}
	next := f.u.merge(snaps)
	f.hub.Update(func(s *registry.Snapshot) bool {
		if sameUnion(*s, next) {
			return false
		}
		*s = next
		return true
	})
}

// stop ends the goroutine and closes the clusters' watchers.
func (f *follower) stop() {
	f.cancel()
	<-f.done
	for _, p := range f.parts {
		if p != nil {
			_ = p.Close()
		}
	}
}
