package zookeeper

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/internal/backoff"
	"github.com/musterhq/muster/registry"
)

// errDisconnected marks a snapshot stale while the connection is down.
var errDisconnected = errors.New("zookeeper: disconnected")

// service follows one service: the I/O loop (run) reads what the events
// marked dirty into the cache and publishes snapshots.
type service struct {
	d    *Discovery
	name string
	path string
	log  *slog.Logger
	wake chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once

	mu       sync.Mutex
	watchers map[*watcher]struct{}
	snap     registry.Snapshot
	// What the events marked to read again.
	reload    bool            // everything
	children  bool            // the list of instance nodes
	overrides bool            // the service node's value
	dirty     map[string]bool // instance nodes' values
}

func newService(d *Discovery, name string) *service {
	s := &service{
		d: d, name: name, path: servicePath(d.o.root, name),
		log:      d.log.With("service", name),
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		watchers: map[*watcher]struct{}{},
		snap:     registry.Snapshot{Service: name},
		reload:   true,
		dirty:    map[string]bool{},
	}
	s.poke() // the first load
	return s
}

func (s *service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// sessionEvent reacts to the connection's state (called under d.mu): a
// lost connection marks the snapshot stale, a (new) session reloads.
func (s *service) sessionEvent(ev zk.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case ev.Type == zk.EventNotWatching, ev.State == zk.StateHasSession:
		s.reload = true
		s.poke()
	case ev.State == zk.StateDisconnected, ev.State == zk.StateExpired:
		if !s.snap.Stale() {
			s.snap.StaleSince, s.snap.Err = time.Now(), errDisconnected
			s.notifyLocked()
		}
	}
}

// nodeEvent marks what a watch event says changed (called under d.mu); id
// is "" for the service's own node.
func (s *service) nodeEvent(ev zk.Event, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case id == "" && ev.Type == zk.EventNodeChildrenChanged:
		s.children = true
	case id == "" && ev.Type == zk.EventNodeDataChanged:
		s.overrides = true
	case id == "":
		s.reload = true // created or deleted
	case ev.Type == zk.EventNodeDeleted:
		s.children = true
	default:
		s.dirty[id] = true
	}
	s.poke()
}

func (s *service) stop() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

func (s *service) closeWatchers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		close(w.ch)
		delete(s.watchers, w)
	}
}

func (s *service) notifyLocked() {
	for w := range s.watchers {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// run reads and publishes until stop, retrying failed reads with backoff.
func (s *service) run() {
	defer close(s.done)
	c := newCache(s.name)
	logged := map[string]int64{} // bad values logged, by ID: mzxid
	bo := backoff.New(defaultBackoffMin, defaultBackoffMax)
	var retry <-chan time.Time
	for {
		select {
		case <-s.quit:
			return
		case <-s.wake:
		case <-retry:
			retry = nil
		}
		s.mu.Lock()
		reload, children, overrides, dirty := s.reload, s.children, s.overrides, s.dirty
		s.reload, s.children, s.overrides, s.dirty = false, false, false, map[string]bool{}
		s.mu.Unlock()
		if reload {
			s.d.loads.Add(1)
		}
		rev, err := s.read(c, logged, reload, children, overrides, dirty)
		if err != nil {
			s.mu.Lock()
			s.reload = true
			if !s.snap.Stale() {
				s.snap.StaleSince = time.Now()
			}
			s.snap.Err = err
			s.notifyLocked()
			s.mu.Unlock()
			s.log.Debug("reading the service failed; retrying", "err", err)
			retry = time.After(bo.Next())
			continue
		}
		bo.Reset()
		list := c.build()
		s.mu.Lock()
		if s.snap.Stale() && s.d.conn.State() == zk.StateHasSession && reload {
			s.log.Info("service read again; list current", "stale_for", time.Since(s.snap.StaleSince).Round(time.Millisecond))
			s.snap.StaleSince, s.snap.Err = time.Time{}, nil
		}
		if rev < s.snap.Revision && reload {
			s.snap.Generation++
			s.log.Warn("zookeeper history went back (restored or restarted empty); new generation",
				"old_revision", s.snap.Revision, "revision", rev)
		}
		if !s.snap.Loaded {
			s.snap.Generation = 1
		}
		s.snap.Instances, s.snap.Loaded = list, true
		if rev > s.snap.Revision || reload {
			s.snap.Revision = rev
		}
		s.notifyLocked()
		s.mu.Unlock()
	}
}

// read brings the cache up to date with what was marked, arming the
// watches again, and returns the highest zxid seen.
func (s *service) read(c *cache, logged map[string]int64, reload, children, overrides bool, dirty map[string]bool) (int64, error) {
	conn := s.d.conn
	var rev int64
	if reload || overrides {
		data, stat, _, err := conn.GetW(s.path)
		if errors.Is(err, zk.ErrNoNode) {
			// No service node yet: empty, and a watch for its creation.
			ok, _, _, err := conn.ExistsW(s.path)
			if err != nil {
				return 0, err
			}
			if ok {
				return 0, errors.New("zookeeper: service node appeared while reading")
			}
			c.keep(nil)
			c.setOverrides(nil)
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		rev = max(rev, stat.Mzxid, stat.Pzxid)
		o, err := parseOverrides(data)
		if err != nil {
			s.log.Warn("bad overrides value skipped", "path", s.path, "err", err)
		}
		c.setOverrides(o)
	}
	if reload || children {
		ids, stat, _, err := conn.ChildrenW(s.path)
		if err != nil {
			return 0, err
		}
		rev = max(rev, stat.Pzxid)
		c.keep(ids)
		for _, id := range ids {
			if reload || !c.has(id) {
				dirty[id] = true
			}
		}
	}
	for id := range dirty {
		data, stat, _, err := conn.GetW(nodePath(s.d.o.root, s.name, id))
		if errors.Is(err, zk.ErrNoNode) {
			c.remove(id)
			continue
		}
		if err != nil {
			return 0, err
		}
		rev = max(rev, stat.Mzxid)
		if err := c.put(id, data, stat.Mzxid); err != nil && logged[id] != stat.Mzxid {
			logged[id] = stat.Mzxid
			s.d.skipped.Add(1)
			s.log.Warn("bad instance value skipped", "id", id, "err", fmt.Errorf("%w", err))
		}
	}
	return rev, nil
}
