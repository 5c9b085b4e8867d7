package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/registry"
)

var (
	_ registry.Registrar      = (*Registrar)(nil)
	_ registry.StatusReporter = (*Registrar)(nil)
)

// Registrar keeps instances registered as ephemeral nodes
// <root>/<service>/<id> of its own ZooKeeper session. When the session
// expires, the client library opens a new one and the registrar writes every
// instance again under it, retrying forever until Close. A node of a live
// instance that vanishes or changes while the session lives (deleted by
// hand) is written again at once (a watch on each node) and at the latest
// at the next audit. It is safe for concurrent use.
type Registrar struct {
	o    options
	log  *slog.Logger
	conn *conn

	wake    chan struct{}
	closing chan struct{}
	done    chan struct{}

	mu       sync.Mutex
	entries  map[string]*entry   // by path: the desired set
	removing map[string]struct{} // paths deregistered, not yet deleted
	changed  chan struct{}       // closed and replaced after each pass
	closed   bool
	st       registry.RegistrarStatus
	session  int64 // the session every entry was last checked under
}

// entry is one instance of the desired set.
type entry struct {
	in    registry.Instance
	path  string
	value []byte
	// gen counts Register calls for the path; written is the gen last
	// written, under session.
	gen, written uint64
	session      int64
	dirty        bool  // to be checked (watch fired, audit)
	watched      int64 // the session whose watch on the node is armed
	err          error // a refusal: the entry left the set
}

// NewRegistrar connects to the ZooKeeper servers (host:port each) and
// returns a registrar; it does not wait for a session, so it starts while
// ZooKeeper is unreachable and registers as soon as a server answers.
func NewRegistrar(servers []string, opts ...Option) (*Registrar, error) {
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	r := &Registrar{
		o:        o,
		log:      o.logger.With("component", "muster.registrar", "backend", "zookeeper"),
		wake:     make(chan struct{}, 1),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		entries:  map[string]*entry{},
		removing: map[string]struct{}{},
		changed:  make(chan struct{}),
	}
	r.st.Since = time.Now()
	c, err := dial(servers, o, r.onEvent)
	if err != nil {
		return nil, err
	}
	r.conn = c
	go r.run()
	return r, nil
}

// onEvent is the library's event callback: it marks a node whose watch
// fired for checking and wakes the loop.
func (r *Registrar) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		r.mu.Lock()
		if e := r.entries[ev.Path]; e != nil {
			e.dirty, e.watched = true, 0
		}
		r.mu.Unlock()
	}
	r.poke()
}

func (r *Registrar) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Register validates in, adds it to the set and waits until it is written
// under the current session, ctx ends or the request timeout passes (then
// the error matches registry.ErrPending and the instance is written later).
// RegisteredAt is set at the first Register of the instance and kept by
// later ones.
func (r *Registrar) Register(ctx context.Context, in registry.Instance) error {
	if err := in.Validate(); err != nil {
		return err
	}
	in = in.Normalize()
	if in.ID == "." || in.ID == ".." {
		return fmt.Errorf("%w: id %q is not a valid ZooKeeper node name", registry.ErrInvalidInstance, in.ID)
	}
	p := nodePath(r.o.root, in.Name, in.ID)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return registry.ErrClosed
	}
	e := r.entries[p]
	if e != nil {
		in.RegisteredAt = e.in.RegisteredAt
	} else {
		if in.RegisteredAt.IsZero() {
			in.RegisteredAt = time.Now().UTC().Truncate(time.Second)
		}
		e = &entry{path: p}
	}
	val, err := registry.Marshal(in)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	e.in, e.value = in, val
	e.gen++
	gen := e.gen
	r.entries[p] = e
	delete(r.removing, p)
	r.mu.Unlock()
	r.poke()
	var refused error
	err = r.wait(ctx, func() bool {
		if r.entries[p] != e { // refused, or deregistered meanwhile
			refused = e.err
			return true
		}
		return e.written >= gen && e.session != 0 && e.session == r.conn.SessionID()
	})
	switch {
	case refused != nil:
		return refused
	case errors.Is(err, registry.ErrClosed):
		return err
	case err != nil:
		return fmt.Errorf("%w: %s: %w", registry.ErrPending, p, err)
	}
	return nil
}

// Deregister removes the instance from the set and deletes its node,
// waiting until it is deleted or ctx ends. A node written serving is first
// written Draining, just before the deletion, so that the deletion is seen
// as deliberate (registry.Snapshot's Retired) and clients release the
// instance at once rather than after the grace they give an instance that
// vanished while serving (package resolver).
func (r *Registrar) Deregister(ctx context.Context, name, id string) error {
	if err := registry.ValidateName(name); err != nil {
		return err
	}
	if err := registry.ValidateID(id); err != nil {
		return err
	}
	p := nodePath(r.o.root, name, id)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return registry.ErrClosed
	}
	if _, ok := r.entries[p]; !ok {
		r.mu.Unlock()
		return nil
	}
	delete(r.entries, p)
	r.removing[p] = struct{}{}
	r.mu.Unlock()
	r.poke()
	return r.wait(ctx, func() bool {
		_, pending := r.removing[p]
		return !pending
	})
}

// wait calls cond under r.mu after every pass of the loop until it is done,
// ctx ends or the request timeout passes.
func (r *Registrar) wait(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.requestTimeout)
	defer cancel()
	for {
		r.mu.Lock()
		ok := cond()
		ch, closed := r.changed, r.closed
		r.mu.Unlock()
		if ok {
			return nil
		}
		if closed {
			return registry.ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the registrar and closes its session, which deletes every
// node it wrote at once, without draining them first (as the etcd
// Registrar's revocation of its lease): clients hold them for the deletion
// grace. It is idempotent.
func (r *Registrar) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.done
		return nil
	}
	r.closed = true
	close(r.closing)
	r.mu.Unlock()
	<-r.done
	r.conn.close()
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	return nil
}

// Status returns the registrar's current state.
func (r *Registrar) Status() registry.RegistrarStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.Instances = len(r.entries)
	st.Pending = 0
	sid := r.conn.SessionID()
	for _, e := range r.entries {
		if e.session != sid || e.written < e.gen {
			st.Pending++
		}
	}
	return st
}

// WaitRegistered blocks until Status().Registered is true or ctx ends.
func (r *Registrar) WaitRegistered(ctx context.Context) error {
	for {
		r.mu.Lock()
		ok, ch := r.st.Registered, r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// nodePath returns the node of one instance: <root>/<service>/<id>.
func nodePath(root, service, id string) string { return registry.Key(root, service, id) }

// servicePath returns the persistent parent node of a service's instances.
func servicePath(root, service string) string { return root + "/" + service }
