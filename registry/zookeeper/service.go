package zookeeper

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/internal/backoff"
	"github.com/musterhq/muster/internal/watchhub"
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

	hub *watchhub.Hub

	mu sync.Mutex
	// What the events marked to read again.
	reload    bool            // everything
	children  bool            // the list of instance nodes
	overrides bool            // the service node's value
	dirty     map[string]bool // instance nodes' values
	armed     armed           // watches set and not fired
}

// newService returns the service name, publishing to hub; its run
// goroutine is not started yet.
func newService(d *Discovery, name string, hub *watchhub.Hub) *service {
	s := &service{
		d: d, name: name, path: servicePath(d.o.root, name),
		log:    d.log.With("service", name),
		wake:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
		reload: true,
		dirty:  map[string]bool{},
		armed:  armed{},
		hub:    hub,
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

// sessionEvent reacts to the connection's state (called under the lock of
// d.services): a lost connection marks the snapshot stale, a (new) session
// reloads.
func (s *service) sessionEvent(ev zk.Event) {
	if ev.Type == zk.EventNotWatching || ev.State == zk.StateExpired {
		s.mu.Lock()
		clear(s.armed) // the library dropped every watch
		s.mu.Unlock()
	}
	switch {
	case ev.Type == zk.EventNotWatching, ev.State == zk.StateHasSession:
		s.mu.Lock()
		s.reload = true
		s.mu.Unlock()
		s.poke()
	case ev.State == zk.StateDisconnected, ev.State == zk.StateExpired:
		s.hub.Update(func(snap *registry.Snapshot) bool {
			if snap.Stale() {
				return false
			}
			snap.StaleSince, snap.Err = time.Now(), errDisconnected
			return true
		})
	}
}

// nodeEvent marks what a watch event says changed; id is "" for the
// service's own node.
func (s *service) nodeEvent(ev zk.Event, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed.fired(id, ev.Type)
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

// run reads and publishes until stop, retrying failed reads with backoff.
func (s *service) run() {
	defer close(s.done)
	c := newCache(s.name)
	logged := map[string]int64{} // bad values logged, by ID: mzxid
	bo := backoff.New(defaultBackoffMin, defaultBackoffMax)
	var retry <-chan time.Time
	loaded := false // a load was begun: the next ones are resyncs
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
			if loaded {
				s.d.resyncs.Add(1)
			}
			loaded = true
		}
		rev, err := s.read(c, logged, reload, children, overrides, dirty)
		if err != nil {
			s.mu.Lock()
			s.reload = true
			s.mu.Unlock()
			s.hub.Update(func(snap *registry.Snapshot) bool {
				if !snap.Stale() {
					snap.StaleSince = time.Now()
				}
				snap.Err = err
				return true
			})
			s.log.Debug("reading the service failed; retrying", "err", err)
			retry = time.After(bo.Next())
			continue
		}
		bo.Reset()
		list := c.build()
		session := s.d.conn.State() == zk.StateHasSession
		s.hub.Update(func(snap *registry.Snapshot) bool {
			s.publish(snap, list, c.retired, rev, reload, session)
			return true
		})
	}
}

// publish records a successful read in snap (under the hub's lock): list,
// retired and rev as read, reload when the read was a full one, session
// when the connection has a session.
func (s *service) publish(snap *registry.Snapshot, list []*registry.Instance, retired []string, rev int64, reload, session bool) {
	if snap.Stale() && session && reload {
		s.log.Info("service read again; list current", "stale_for", time.Since(snap.StaleSince).Round(time.Millisecond))
		snap.StaleSince, snap.Err = time.Time{}, nil
	}
	if rev < snap.Revision && reload {
		snap.Generation++
		s.log.Warn("zookeeper history went back (restored or restarted empty); new generation",
			"old_revision", snap.Revision, "revision", rev)
	}
	if !snap.Loaded {
		snap.Generation = 1
	}
	snap.Instances, snap.Retired, snap.Loaded = list, retired, true
	if rev > snap.Revision || reload {
		snap.Revision = rev
	}
}

// read brings the cache up to date with what was marked (dirty: the
// instance nodes whose watch fired), arming the watches again, and returns
// the highest zxid seen.
func (s *service) read(c *cache, logged map[string]int64, reload, children, overrides bool, dirty map[string]bool) (int64, error) {
	conn := s.d.conn
	changed := maps.Clone(dirty) // notified changes, unread: see cache.left
	var rev int64
	if reload || overrides {
		data, stat, err := s.get(watchKey{}, s.path)
		if errors.Is(err, zk.ErrNoNode) {
			// No service node yet: empty, and a watch for its creation.
			var ok bool
			err := s.watched(watchKey{}, func() (err error) {
				ok, _, _, err = conn.ExistsW(s.path)
				return err
			}, func() (err error) {
				ok, _, err = conn.Exists(s.path)
				return err
			})
			if err != nil {
				return 0, err
			}
			if ok {
				return 0, errors.New("zookeeper: service node appeared while reading")
			}
			c.keep(nil, changed)
			c.setOverrides(nil)
			// The root's pzxid: the zxid of the service node's
			// deletion, if it was deleted, so that a node deleted by
			// hand does not look like history going back.
			ok, stat, err := conn.Exists(s.d.o.root)
			if err != nil || !ok {
				return 0, err
			}
			return stat.Pzxid, nil
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
		var ids []string
		var stat *zk.Stat
		err := s.watched(watchKey{children: true}, func() (err error) {
			ids, stat, _, err = conn.ChildrenW(s.path)
			return err
		}, func() (err error) {
			ids, stat, err = conn.Children(s.path)
			return err
		})
		if err != nil {
			return 0, err
		}
		rev = max(rev, stat.Pzxid)
		c.keep(ids, changed)
		for _, id := range ids {
			if reload || !c.has(id) {
				dirty[id] = true
			}
		}
	}
	for _, n := range s.readNodes(dirty) {
		if errors.Is(n.err, zk.ErrNoNode) {
			c.remove(n.id, changed[n.id])
			continue
		}
		if n.err != nil {
			return 0, n.err
		}
		rev = max(rev, n.stat.Mzxid)
		if err := c.put(n.id, n.data, n.stat.Mzxid); err != nil && logged[n.id] != n.stat.Mzxid {
			logged[n.id] = n.stat.Mzxid
			s.d.skipped.Add(1)
			s.log.Warn("bad instance value skipped", "id", n.id, "err", fmt.Errorf("%w", err))
		}
	}
	return rev, nil
}

// nodeRead is the outcome of reading one instance node.
type nodeRead struct {
	id   string
	data []byte
	stat *zk.Stat
	err  error
}

// readNodes reads the instance nodes ids (arming their data watches),
// up to maxInFlight at once, and returns every outcome once all are in.
func (s *service) readNodes(ids map[string]bool) []nodeRead {
	out := make([]nodeRead, 0, len(ids))
	for id := range ids {
		out = append(out, nodeRead{id: id})
	}
	inFlight(len(out), func(i int) {
		n := &out[i]
		n.data, n.stat, n.err = s.get(watchKey{id: n.id}, nodePath(s.d.o.root, s.name, n.id))
	})
	return out
}

// watched runs set, a request that sets the watch k, when k is not armed
// (and counts it), else plain, the same request without a watch.
func (s *service) watched(k watchKey, set, plain func() error) error {
	s.mu.Lock()
	arm := s.armed.arm(k)
	s.mu.Unlock()
	if !arm {
		return plain()
	}
	err := set()
	if err != nil { // no watch set
		s.mu.Lock()
		delete(s.armed, k)
		s.mu.Unlock()
		return err
	}
	s.d.watchRequests.Add(1)
	return nil
}

// get reads the value of the node at path, with the data watch k.
func (s *service) get(k watchKey, path string) (data []byte, stat *zk.Stat, err error) {
	err = s.watched(k, func() (err error) {
		data, stat, _, err = s.d.conn.GetW(path)
		return err
	}, func() (err error) {
		data, stat, err = s.d.conn.Get(path)
		return err
	})
	return data, stat, err
}
