package zookeeper

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/internal/backoff"
	"github.com/musterhq/muster/registry"
)

// run makes every write to ZooKeeper, one pass at a time. Each pass
// deletes deregistered nodes, then writes every entry not yet written
// under the current session (all of them after a session expired), or
// found missing or altered (a watch fired, or the audit); each path once,
// up to maxInFlight at once.
func (r *Registrar) run() {
	defer close(r.done)
	bo := backoff.New(defaultBackoffMin, defaultBackoffMax)
	audit := time.NewTicker(r.o.auditEvery)
	defer audit.Stop()
	var retry *time.Timer
	var retryC <-chan time.Time
	for {
		select {
		case <-r.closing:
			if retry != nil {
				retry.Stop()
			}
			return
		case <-r.wake:
		case <-retryC:
			retry, retryC = nil, nil
		case <-audit.C:
			r.markAll()
		}
		if err := r.pass(); err != nil {
			r.failed(err)
			if retry == nil {
				retry = time.NewTimer(bo.Next())
				retryC = retry.C
			}
			continue
		}
		bo.Reset()
		if retry != nil {
			retry.Stop()
			retry, retryC = nil, nil
		}
	}
}

// markAll marks every entry for checking (the audit).
func (r *Registrar) markAll() {
	r.mu.Lock()
	for _, e := range r.entries {
		e.dirty = true
	}
	r.mu.Unlock()
}

// work is what one pass has to do, copied under the lock.
type work struct {
	path  string
	value []byte
	gen   uint64
	watch bool // arm a watch on the node
	fresh bool // not written under this session yet
	e     *entry
}

// pass brings ZooKeeper to the desired set under the current session.
func (r *Registrar) pass() error {
	defer r.broadcast()
	sid := r.conn.SessionID()
	if r.conn.State() != zk.StateHasSession || sid == 0 {
		r.setRegistered(false)
		return nil // the session event wakes the loop
	}
	r.mu.Lock()
	if r.session != sid {
		if r.session != 0 && len(r.entries) > 0 {
			r.st.Reregistrations++
			r.log.Warn("zookeeper session changed; writing every instance again",
				"old_session", fmt.Sprintf("%#x", r.session), "session", fmt.Sprintf("%#x", sid), "instances", len(r.entries))
		}
		r.session = sid
	}
	var todo []work
	for p, e := range r.entries {
		if e.session != sid || e.written < e.gen || e.dirty {
			todo = append(todo, work{path: p, value: e.value, gen: e.gen, watch: e.watched != sid && !r.o.noNodeWatches, fresh: e.session != sid, e: e})
			e.dirty = false
		}
	}
	var gone []string
	for p := range r.removing {
		gone = append(gone, p)
	}
	r.mu.Unlock()

	var errs []error
	// Removals first (a path removed and registered again is removed,
	// then written), each set in flight together: see inFlight.
	removed := make([]error, len(gone))
	inFlight(len(gone), func(i int) { removed[i] = r.remove(gone[i], sid) })
	for i, p := range gone {
		if err := removed[i]; err != nil {
			errs = append(errs, err)
			continue
		}
		r.mu.Lock()
		if _, again := r.entries[p]; !again {
			delete(r.removing, p)
		}
		r.mu.Unlock()
	}
	type written struct {
		changed bool
		err     error
	}
	wrote := make([]written, len(todo))
	inFlight(len(todo), func(i int) {
		w := todo[i]
		wrote[i].changed, wrote[i].err = r.write(w.path, w.value, sid, w.watch, w.fresh)
	})
	for i, w := range todo {
		changed, err := wrote[i].changed, wrote[i].err
		r.mu.Lock()
		switch {
		case err != nil && !retryable(err) && w.e.session != sid && w.e.written == 0:
			// Refused before it was ever written: not kept.
			w.e.err = fmt.Errorf("zookeeper: register %s: %w", w.path, err)
			if r.entries[w.path] == w.e {
				delete(r.entries, w.path)
			}
		case err != nil:
			w.e.dirty = true
			errs = append(errs, fmt.Errorf("zookeeper: write %s: %w", w.path, err))
		default:
			if changed && w.e.session == sid && w.e.written == w.gen {
				r.st.Repairs++
				r.log.Warn("instance node was missing or altered; written again", "path", w.path)
			}
			w.e.session, w.e.watched = sid, sid
			if w.gen > w.e.written {
				w.e.written = w.gen
			}
		}
		r.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.setRegistered(r.conn.SessionID() == sid)
	return nil
}

// write makes p an ephemeral node of session sid holding value, with a
// watch on it if watch is set (one per session: the library keeps a watch
// until it fires, and re-arms it after a reconnection). It reports whether
// the node had to be created or changed. A fresh node (not written under
// this session yet) is created first and read only if it exists.
func (r *Registrar) write(p string, value []byte, sid int64, watch, fresh bool) (changed bool, err error) {
	for attempt := 0; attempt < 3; attempt++ {
		var data []byte
		var stat *zk.Stat
		switch {
		case fresh && attempt == 0:
			err = zk.ErrNoNode // try creating first: one round trip less
		case watch:
			data, stat, _, err = r.conn.GetW(p)
		default:
			data, stat, err = r.conn.Get(p)
		}
		switch {
		case errors.Is(err, zk.ErrNoNode):
			_, err = r.conn.Create(p, value, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			if errors.Is(err, zk.ErrNoNode) {
				if err = ensurePath(r.conn.Conn, path.Dir(p)); err == nil {
					_, err = r.conn.Create(p, value, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
				}
			}
			if errors.Is(err, zk.ErrNodeExists) {
				continue
			}
			if err == nil && !r.o.noNodeWatches {
				// Watch the new node (its deletion, a change by hand).
				_, _, _, err = r.conn.ExistsW(p)
			}
			return true, err
		case err != nil:
			return false, err
		case stat.EphemeralOwner != sid:
			// Another session's node (an expired session's, not yet
			// removed, or another writer's): the registrar owns its key.
			if err := r.conn.Delete(p, stat.Version); err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
				return false, err
			}
			continue
		case !bytes.Equal(data, value):
			if _, err := r.conn.Set(p, value, stat.Version); err != nil && !errors.Is(err, zk.ErrBadVersion) {
				return false, err
			}
			return true, nil
		default:
			return false, nil
		}
	}
	return false, fmt.Errorf("zookeeper: %s kept changing under the registrar", p)
}

// remove deletes p if session sid owns it, first writing it Draining (see
// drain).
func (r *Registrar) remove(p string, sid int64) error {
	data, stat, err := r.conn.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	if stat.EphemeralOwner != sid {
		return nil
	}
	version, err := r.drain(p, data, stat.Version)
	if err != nil {
		return err
	}
	if err := r.conn.Delete(p, version); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

// drain writes the instance node p, holding value at version, Draining
// just before remove deletes it, so that a Discovery sees it deleted while
// Draining, a deliberate departure (Snapshot.Retired), which clients
// release at once, where they hold an instance deleted while serving for a
// grace. It returns the node's version after the write. Its failure only
// costs that (the deletion goes on), unless ZooKeeper does not answer.
func (r *Registrar) drain(p string, value []byte, version int32) (int32, error) {
	in, err := registry.Unmarshal(value)
	if err != nil || in.Draining {
		return version, nil
	}
	in.Draining = true
	val, err := registry.Marshal(in)
	if err != nil {
		return version, nil
	}
	stat, err := r.conn.Set(p, val, version)
	switch {
	case err == nil:
		return stat.Version, nil
	case retryable(err):
		return version, fmt.Errorf("zookeeper: drain %s before deleting it: %w", p, err)
	}
	return version, nil
}

func (r *Registrar) failed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.Failures++
	r.st.LastError, r.st.LastErrorAt = err, time.Now()
	r.setRegisteredLocked(false)
	r.log.Debug("registration pass failed; retrying", "err", err)
}

func (r *Registrar) setRegistered(ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.st.LastError = nil
	}
	r.setRegisteredLocked(ok)
}

func (r *Registrar) setRegisteredLocked(ok bool) {
	if ok {
		r.st.Session = r.session
	}
	if r.st.Registered != ok {
		r.st.Registered, r.st.Since = ok, time.Now()
	}
}

// broadcast wakes everyone waiting for a pass.
func (r *Registrar) broadcast() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}
