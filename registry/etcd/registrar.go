package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/registry"
)

var (
	_ registry.Registrar      = (*Registrar)(nil)
	_ registry.StatusReporter = (*Registrar)(nil)
)

// Registrar registers instances in etcd under one lease, keeps the lease
// alive, and re-registers every instance under a new lease whenever the old
// one is lost, retrying with backoff until Close.
//
// Every key it writes is bound to its lease in the same request, so a key
// never outlives the process by more than the TTL. Keys are named after the
// instance ID, so a re-registration rewrites the same key.
//
// One goroutine, the run loop (registrar_loop.go), owns the set of
// instances and makes every write to etcd, so a Register and a Deregister
// of the same instance can never leave a stale key behind. Register and
// Deregister hand it a call with a reply channel and wait for the answer;
// it publishes the registrar's status for Status and WaitRegistered. A
// Registrar is safe for concurrent use.
type Registrar struct {
	opts options
	// inbox carries calls, and the events of the watches of the
	// registrar's own keys, to the run loop.
	inbox *inbox
	// state is the status the run loop published last.
	state atomic.Pointer[registry.RegistrarStatus]
	// closing is closed when Close is called; cancel closes it, ending
	// the run loop's context.
	closing <-chan struct{}
	cancel  context.CancelFunc
	// done is closed when the run loop has returned, its leases revoked
	// (loop.closeErr says how that went).
	done chan struct{}
	// loop is the run loop. Its state is its goroutine's alone; Close
	// reads its closeErr once done is closed.
	loop *loop
}

// call is a Register, a Deregister or a WaitRegistered on its way to the
// run loop, and then, until the loop answers it, waiting for its key (or
// for the registrar to be registered).
type call struct {
	key string // "" for a WaitRegistered
	// in is a Register's instance; nil for a Deregister.
	in *registry.Instance
	// e is the entry a Register waits to see written; set by the loop.
	e *entry
	// reply receives the call's outcome, once; capacity 1, so the loop
	// never waits for a caller that has stopped listening.
	reply chan error
	// ctx and deadline (zero: none) are the caller's: once either ends,
	// the caller no longer listens, and the loop forgets the call.
	ctx      context.Context
	deadline time.Time
}

// gaveUp reports whether c's caller stopped waiting at now.
func (c *call) gaveUp(now time.Time) bool {
	return c.ctx.Err() != nil || (!c.deadline.IsZero() && !now.Before(c.deadline))
}

// NewRegistrar returns a Registrar that uses cli. It does not contact etcd:
// it works while etcd is unreachable and registers as soon as etcd answers.
// The lease is granted when the first instance is registered. cli stays
// owned by the caller and must outlive the Registrar.
func NewRegistrar(cli *clientv3.Client, opts ...RegistrarOption) (*Registrar, error) {
	if cli == nil {
		return nil, errors.New("etcd: NewRegistrar: nil client")
	}
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registrar{
		opts:    o,
		inbox:   newInbox(),
		closing: ctx.Done(),
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	r.loop = newLoop(ctx, cli, r)
	go r.loop.run()
	return r, nil
}

// Register validates in, fills its defaults (ID from Addr, weight, the
// registration time) and adds it to the set; the run loop writes it with
// the lease. Register returns nil once the value is in etcd. It waits at
// most until ctx ends or the request timeout (WithRequestTimeout) passes,
// and then returns an error matching registry.ErrPending: the instance is
// kept and written as soon as etcd answers. While the registrar's last
// attempt failed because etcd did not answer (it is waiting to retry),
// Register returns that error at once, with the last etcd error. An instance etcd refuses for
// good (permission denied, value too large) is dropped and the error says
// why.
func (r *Registrar) Register(ctx context.Context, in registry.Instance) error {
	if err := in.Validate(); err != nil {
		return err
	}
	in = in.Normalize()
	return r.call(ctx, registry.Key(r.opts.prefix, in.Name, in.ID), &in)
}

// Deregister removes the instance of service name with ID id (as
// registered: Register defaults the ID to the Addr) and deletes its key, if the key is still bound to this registrar's
// lease. It returns once the key is deleted. An instance written serving is
// first written Draining, in a transaction of its own just before the
// deletion's, so that the deletion is seen as deliberate (registry.Snapshot's
// Retired) and clients release the instance at once rather than after the
// grace they give an instance that vanished while serving (package
// resolver). If etcd does not answer before
// ctx ends or the request timeout passes, the error matches
// registry.ErrPending and the key is deleted when etcd answers, or expires
// with the lease. If the registrar's lease is lost meanwhile, it returns
// once the key is not written under the new lease: a key still held by the
// old one goes when the registrar revokes it (after writing every
// instance again) or when it expires. If the registrar closes before the
// key is deleted, it returns registry.ErrClosed: Close's revocation of the
// lease removes the key.
func (r *Registrar) Deregister(ctx context.Context, name, id string) error {
	if err := registry.ValidateName(name); err != nil {
		return err
	}
	if err := registry.ValidateID(id); err != nil {
		return err
	}
	return r.call(ctx, registry.Key(r.opts.prefix, name, id), nil)
}

// call hands the run loop a Register (in not nil) or a Deregister of key
// and waits for its answer until ctx ends, the request timeout passes or
// the registrar closes. The call is queued however ctx stands: an ended
// ctx registers without waiting.
func (r *Registrar) call(ctx context.Context, key string, in *registry.Instance) error {
	select {
	case <-r.closing:
		return registry.ErrClosed
	default:
	}
	timer := time.NewTimer(r.opts.requestTimeout)
	defer timer.Stop()
	c := &call{key: key, in: in, reply: make(chan error, 1), ctx: ctx, deadline: time.Now().Add(r.opts.requestTimeout)}
	r.inbox.put(message{call: c})
	if last := r.Status().LastError; unreachable(last) {
		// The last attempt failed and the next waits for its backoff:
		// no need to wait for the request timeout to learn that etcd
		// does not answer.
		return pendingError(errRetrying, last)
	}
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return pendingError(ctx.Err(), r.Status().LastError)
	case <-timer.C:
		return pendingError(context.DeadlineExceeded, r.Status().LastError)
	case <-r.closing:
		// Close's revocation of the lease removes the key.
		return closedAnswer(c)
	}
}

// closedAnswer returns c's answer if the run loop sent it already (Close
// came just after), ErrClosed otherwise.
func closedAnswer(c *call) error {
	select {
	case err := <-c.reply:
		return err
	default:
		return registry.ErrClosed
	}
}

// unreachable reports whether err says that etcd did not answer: no
// connection, or no answer before the request's deadline.
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	var ce *ConnectionError
	if errors.As(err, &ce) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// errRetrying is the cause of an ErrPending returned at once because the
// registrar's last attempt to reach etcd failed.
var errRetrying = errors.New("etcd: not reachable at the last attempt; retrying with backoff")

func pendingError(cause, last error) error {
	if last != nil {
		return fmt.Errorf("%w (%w; last etcd error: %w)", registry.ErrPending, cause, last)
	}
	return fmt.Errorf("%w (%w)", registry.ErrPending, cause)
}

// Status returns the registrar's current state.
func (r *Registrar) Status() registry.RegistrarStatus { return *r.state.Load() }

// WaitRegistered blocks until every instance is written under a live lease
// (Status().Registered), ctx ends, or the registrar is closed. The
// instances of the Registers that returned before it was called count,
// whether those waited for their write or not.
func (r *Registrar) WaitRegistered(ctx context.Context) error {
	select {
	case <-r.closing:
		return registry.ErrClosed
	default:
	}
	c := &call{reply: make(chan error, 1), ctx: ctx}
	r.inbox.put(message{call: c})
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-r.closing:
		return closedAnswer(c)
	}
}

// Close stops re-registration and revokes the lease, which deletes every key
// of this registrar at once. If etcd does not answer within the request
// timeout, the keys expire with the TTL instead and the error says so. Close
// is idempotent; later calls return the first call's result.
func (r *Registrar) Close() error {
	r.cancel()
	<-r.done
	return r.loop.closeErr
}

// inbox is the run loop's queue: calls and watch events, in order. It
// never makes a sender wait for the loop, which may be in the middle of a
// transaction.
type inbox struct {
	mu    sync.Mutex
	queue []message
	ready chan struct{} // capacity 1: the queue is not empty
}

// message is one item of the inbox: a call, deletions seen by a watch of
// the registrar's keys, or an audit due (reopened): a watch of them working
// again after it ended, or showing etcd below the registrar's last write.
type message struct {
	call     *call
	deleted  []deletion
	reopened bool
}

func newInbox() *inbox { return &inbox{ready: make(chan struct{}, 1)} }

// put queues m and wakes the run loop.
func (b *inbox) put(m message) {
	b.mu.Lock()
	b.queue = append(b.queue, m)
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take returns every queued message, oldest first, and empties the queue.
func (b *inbox) take() []message {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue
	b.queue = nil
	return q
}
