package kubernetes

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

// service follows one Kubernetes service: an informer over its slices and
// the goroutine that turns the informer's store into snapshots.
type service struct {
	d      *Discovery
	ref    serviceRef
	m      mapping
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	// dirty is signalled when the store or the staleness changed; a burst
	// of events makes one snapshot.
	dirty chan struct{}
	// logged is, per slice name, the resource version whose skipped
	// endpoints were logged and counted. Only run uses it.
	logged map[string]string

	// hub holds the snapshot and the watchers; only run publishes.
	hub *watchhub.Hub

	mu         sync.Mutex
	staleSince time.Time // when list and watch started failing
	lastErr    error
}

// stop ends the informer and the run goroutine and waits for both.
func (s *service) stop() {
	s.cancel()
	<-s.done
}

func (s *service) poke() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// run starts the informer, publishes the first snapshot once it has
// listed the slices, then one snapshot per change, until ctx ends.
func (s *service) run(ctx context.Context) {
	defer close(s.done)
	inf := cache.NewSharedIndexInformerWithOptions(s.listWatch(), &discoveryv1.EndpointSlice{}, cache.SharedIndexInformerOptions{})
	// The handler only wakes this goroutine, which reads the store: the
	// list is always built from every slice of the service.
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: func(any) { s.poke() },
	})
	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(ctx) })
	defer wg.Wait()
	synced := inf.HasSyncedChecker().Done()
	loaded := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-synced:
			synced, loaded = nil, true
		case <-s.dirty:
		}
		s.publish(inf.GetStore().List(), loaded)
	}
}

// listWatch lists and watches the service's slices, and records whether
// the API server answered (staleness).
func (s *service) listWatch() cache.ListerWatcher {
	slices := s.d.client.DiscoveryV1().EndpointSlices(s.ref.namespace)
	selector := discoveryv1.LabelServiceName + "=" + s.ref.name
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			obj, err := slices.List(ctx, o)
			s.answered(ctx, err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			w, err := slices.Watch(ctx, o)
			s.answered(ctx, err)
			return w, err
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, s.d.client)
}

// answered records the outcome of a list or watch request: a failure
// makes the snapshot stale (instances kept), a success fresh again.
func (s *service) answered(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopping
	}
	s.mu.Lock()
	wasStale := !s.staleSince.IsZero()
	if err != nil {
		s.d.listErrors.Add(1)
		if !wasStale {
			s.staleSince = time.Now()
		}
		s.lastErr = err
	} else {
		s.staleSince, s.lastErr = time.Time{}, nil
	}
	s.mu.Unlock()
	switch {
	case err != nil && !wasStale:
		s.log.Warn("list or watch of endpoint slices failed; keeping the last known instances", "error", err)
	case err == nil && wasStale:
		s.log.Info("list or watch of endpoint slices answered again; list current again")
	}
	if err != nil || wasStale {
		s.poke() // the snapshot's StaleSince or Err changes
	}
}

// publish makes the next snapshot from the store's slices (when the
// informer has listed them) and the staleness, and wakes the watchers if
// anything changed.
func (s *service) publish(objs []any, loaded bool) {
	prev := s.hub.Snapshot()
	next := prev
	s.mu.Lock()
	next.StaleSince, next.Err = s.staleSince, s.lastErr
	s.mu.Unlock()
	if loaded {
		all := make([]*discoveryv1.EndpointSlice, 0, len(objs))
		for _, o := range objs {
			// The label selector is the API server's filter; checking it
			// again costs little and keeps a slice relabelled to another
			// service out even where a watch does not filter (client-go's
			// fake clientset).
			if sl, ok := o.(*discoveryv1.EndpointSlice); ok && sl.Labels[discoveryv1.LabelServiceName] == s.ref.name {
				all = append(all, sl)
			}
		}
		list, skips := s.m.instances(all, prev.Instances)
		s.report(all, skips)
		if !prev.Loaded || !slices.Equal(list, prev.Instances) {
			next.Instances = list
			next.Revision++
		}
		next.Loaded, next.Generation = true, 1
	}
	if next.Revision == prev.Revision && next.Loaded == prev.Loaded &&
		next.StaleSince.Equal(prev.StaleSince) && next.Err == prev.Err {
		return
	}
	s.hub.Update(func(snap *registry.Snapshot) bool {
		*snap = next
		return true
	})
}

// report logs and counts skipped endpoints once per slice version.
func (s *service) report(all []*discoveryv1.EndpointSlice, skips []skip) {
	versions := make(map[string]string, len(all))
	for _, sl := range all {
		versions[sl.Name] = sl.ResourceVersion
	}
	for _, sk := range skips {
		if rv, ok := s.logged[sk.slice]; ok && rv == versions[sk.slice] {
			continue
		}
		s.d.skipped.Add(uint64(sk.endpoints))
		s.log.Warn("endpoints skipped", "slice", sk.slice, "endpoints", sk.endpoints, "reason", sk.reason)
	}
	clear(s.logged)
	for _, sk := range skips {
		s.logged[sk.slice] = versions[sk.slice]
	}
}
