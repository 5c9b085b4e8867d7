package console

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/musterhq/muster/registry"
)

// fleet follows every service for the services pages (see fleetHub).
type fleet struct {
	d        lister
	memory   *fleetMemory // what the last run knew; shared by the runs
	followed map[string]*followed
	notify   chan struct{}
	wg       sync.WaitGroup
}

// followed is one service of a fleet.
type followed struct {
	w          registry.Watcher
	seen       []*registry.Instance
	loaded     bool
	lastChange time.Time
}

// relist lists the services and follows the new ones; it stops following
// those that are gone.
func (f *fleet) relist(ctx context.Context) error {
	names, err := f.d.Services(ctx)
	if err != nil {
		return err
	}
	keep := make(map[string]bool, len(names))
	for _, name := range names {
		keep[name] = true
		if f.followed[name] != nil {
			continue
		}
		w, err := f.d.Watch(ctx, name)
		if err != nil {
			return err
		}
		f.followed[name] = &followed{w: w}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for range w.Updates() {
				select {
				case f.notify <- struct{}{}:
				default:
				}
			}
		}()
	}
	for name, fl := range f.followed {
		if !keep[name] {
			_ = fl.w.Close()
			delete(f.followed, name)
		}
	}
	f.memory.forget(keep)
	return nil
}

// view summarizes every followed service and returns the highest revision
// among them, and whether some service is still loading (neither loaded
// nor stale).
func (f *fleet) view(now time.Time) (v fleetView, rev int64, loading bool) {
	v = fleetView{Services: make([]serviceRow, 0, len(f.followed))}
	for name, fl := range f.followed {
		snap := fl.w.Snapshot()
		if snap.Loaded {
			switch {
			case !fl.loaded:
				fl.lastChange = f.memory.recall(name, snap.Instances, now)
				f.memory.keep(name, snap.Instances, fl.lastChange)
			case !registry.EqualInstances(fl.seen, snap.Instances):
				fl.lastChange = now
				f.memory.keep(name, snap.Instances, now)
			}
			fl.seen, fl.loaded = snap.Instances, true
		}
		rev = max(rev, snap.Revision)
		loading = loading || (!snap.Loaded && !snap.Stale())
		row := newServiceRow(snap, fl.lastChange)
		v.Stale = v.Stale || row.Stale
		v.Services = append(v.Services, row)
	}
	sortRows(v.Services)
	return v, rev, loading
}

// close stops following every service and waits for the forwarders.
func (f *fleet) close() {
	for _, fl := range f.followed {
		_ = fl.w.Close()
	}
	f.wg.Wait()
}

// handleFleetEvents streams the services page's state: a "state" event at
// once and after each change (or "resumed" first if the client's
// Last-Event-ID is the current revision). Every stream sends what one
// shared fleetHub follows.
func (s *Server) handleFleetEvents(w http.ResponseWriter, r *http.Request) {
	ctx, stop := s.streamContext(r)
	defer stop()
	changed, unsubscribe := s.fleet.subscribe()
	defer unsubscribe()
	es, err := startStream(w)
	if err != nil {
		return
	}
	last := lastEventID(r)
	hb := time.NewTicker(heartbeat)
	defer hb.Stop()
	var sent []byte
	for {
		// Until every service is loaded the page would show counts that
		// are not known: wait, unless etcd is not answering.
		if st := s.fleet.current(); st.ready && !bytes.Equal(st.data, sent) {
			if sent == nil && last != 0 && st.rev == last && !st.stale {
				err = es.send("resumed", st.rev, resumed{Revision: st.rev})
			} else {
				err = es.send("state", st.rev, json.RawMessage(st.data))
			}
			if err != nil {
				return
			}
			sent = st.data
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-hb.C:
			if es.comment() != nil {
				return
			}
		}
	}
}
