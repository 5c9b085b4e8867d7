package kratos

import (
	"context"

	kratosregistry "github.com/go-kratos/kratos/v2/registry"

	"github.com/musterhq/muster/registry"
)

// watcher is a Kratos watcher over a Muster one. Kratos calls Next from
// one goroutine.
type watcher struct {
	ctx    context.Context
	cancel context.CancelFunc
	w      registry.Watcher
	first  bool
}

// Next blocks until the list is loaded (first call) or changed, and
// returns it; after Stop, or when the watch ends, it returns an error.
func (w *watcher) Next() ([]*kratosregistry.ServiceInstance, error) {
	for {
		if s := w.w.Snapshot(); w.first && s.Loaded {
			w.first = false
			return list(s), nil
		}
		select {
		case <-w.ctx.Done():
			return nil, w.ctx.Err()
		case _, ok := <-w.w.Updates():
			if !ok {
				return nil, registry.ErrClosed
			}
			if s := w.w.Snapshot(); s.Loaded {
				w.first = false
				return list(s), nil
			}
		}
	}
}

// Stop ends the watch. It is idempotent.
func (w *watcher) Stop() error {
	w.cancel()
	return w.w.Close()
}

func list(s registry.Snapshot) []*kratosregistry.ServiceInstance {
	out := make([]*kratosregistry.ServiceInstance, len(s.Instances))
	for i, in := range s.Instances {
		out[i] = kratosInstance(in)
	}
	return out
}
