package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/musterhq/muster/registry"
)

// fleet follows every service for the services pages (see fleetHub).
type fleet struct {
	s        *Server
	memory   *fleetMemory // what the last run knew; shared by the runs
	followed map[string]*followed
	notify   chan struct{}
	// lists are what each cluster listed (s.parts' order); listed
	// receives the listings that end.
	lists  []partList
	listed chan partListed
	wg     sync.WaitGroup
}

// partList is what a fleet knows of one cluster's list of services.
type partList struct {
	// names are the services it listed last time it answered.
	names []string
	// answered is true once it answered; done once a listing ended.
	answered, done bool
	// listing is true while a listing runs.
	listing bool
	// err is the last listing's error (nil if it answered), and
	// failingSince when the listings started failing.
	err          error
	failingSince time.Time
}

// partListed is the end of one cluster's listing.
type partListed struct {
	part  int
	names []string
	err   error
	at    time.Time
}

// followed is one service of a fleet.
type followed struct {
	w          registry.Watcher
	seen       []*registry.Instance
	loaded     bool
	lastChange time.Time
}

func newFleet(s *Server, memory *fleetMemory) *fleet {
	return &fleet{s: s, memory: memory, followed: map[string]*followed{}, notify: make(chan struct{}, 1),
		lists: make([]partList, len(s.parts)), listed: make(chan partListed, len(s.parts))}
}

// startListing lists the services of each cluster whose last listing has
// ended, each in a goroutine of its own, so that a cluster that does not
// answer holds back neither the others nor the changes of the services
// followed. The one cluster of New is listed through the console's view
// (with its legacy sources).
func (f *fleet) startListing(ctx context.Context) {
	for i, p := range f.s.parts {
		if f.lists[i].listing {
			continue
		}
		f.lists[i].listing = true
		var l registry.ServiceLister = p.d
		if !f.s.several() {
			l = f.s.view
		}
		f.wg.Go(func() {
			lctx, cancel := f.s.request(ctx)
			names, err := l.Services(lctx)
			cancel()
			select {
			case f.listed <- partListed{part: i, names: names, err: err, at: time.Now()}:
			case <-ctx.Done():
			}
		})
	}
}

// applyListing records r and follows the services listed by some cluster
// (a cluster that did not answer by the names it listed last), and stops
// following those that are gone.
func (f *fleet) applyListing(ctx context.Context, r partListed) {
	pl := &f.lists[r.part]
	pl.listing, pl.done = false, true
	if r.err != nil {
		if pl.err == nil {
			pl.failingSince = r.at
		}
		pl.err = r.err
		return
	}
	pl.names, pl.answered, pl.err = r.names, true, nil
	keep := map[string]bool{}
	for _, l := range f.lists {
		for _, name := range l.names {
			keep[name] = true
		}
	}
	for name := range keep {
		if f.followed[name] != nil {
			continue
		}
		w, err := f.s.view.Watch(ctx, name)
		if err != nil {
			// Only a closed Discovery refuses; the next listing tries
			// again.
			pl.err, pl.failingSince = err, r.at
			continue
		}
		f.followed[name] = &followed{w: w}
		f.wg.Go(func() {
			for range w.Updates() {
				select {
				case f.notify <- struct{}{}:
				default:
				}
			}
		})
	}
	for name, fl := range f.followed {
		if !keep[name] {
			_ = fl.w.Close()
			delete(f.followed, name)
		}
	}
	f.memory.forget(keep)
}

// listed reports whether some cluster's listing has ended.
func (f *fleet) listedOnce() bool {
	return slices.ContainsFunc(f.lists, func(l partList) bool { return l.done })
}

// listErr is the error of the last listings: the one cluster's, or,
// over several, every cluster's when none answered; nil when one did.
func (f *fleet) listErr() error {
	var errs []error
	for i, l := range f.lists {
		if l.err == nil {
			return nil
		}
		if f.s.several() {
			errs = append(errs, fmt.Errorf("cluster %s: %w", f.s.parts[i].name, l.err))
		} else {
			errs = append(errs, l.err)
		}
	}
	return errors.Join(errs...)
}

// view summarizes every followed service and returns the highest revision
// among them, and whether some service is still loading (neither loaded
// nor stale).
func (f *fleet) view(now time.Time) (v fleetView, rev int64, loading bool) {
	v = fleetView{Services: make([]serviceRow, 0, len(f.followed))}
	snaps := make([]registry.Snapshot, 0, len(f.followed))
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
		if f.s.several() {
			row.Clusters = map[string]int{}
			for _, p := range f.s.parts {
				row.Clusters[p.name] = 0
			}
			for _, c := range snap.Clusters {
				row.Clusters[c.Cluster] = len(c.Instances)
			}
		}
		v.Stale = v.Stale || row.Stale
		v.Services = append(v.Services, row)
		snaps = append(snaps, snap)
	}
	sortRows(v.Services)
	if err := f.listErr(); err != nil {
		v.Stale, v.Error = true, err.Error()
	}
	if f.s.several() {
		for i, p := range f.s.parts {
			v.Clusters = append(v.Clusters, newClusterHealth(p, f.lists[i], snaps))
		}
	}
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
			// Over several clusters the revision (a sum) names no one
			// state: a reconnecting page is sent the state.
			if sent == nil && last != 0 && st.rev == last && !st.stale && !s.several() {
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
