package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
// All writes to etcd happen on one goroutine, so a Register and a
// Deregister of the same instance can never leave a stale key behind. A
// Registrar is safe for concurrent use.
type Registrar struct {
	cli    *clientv3.Client
	opts   options
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{} // capacity 1: something to reconcile
	done   chan struct{} // closed when run returns

	mu sync.Mutex
	// keys is the desired set, what is written under the lease, and
	// the bookkeeping that keeps the two in step (registrar_keyset.go).
	keys keyset
	// orphan is a lease the run loop believes lost but has not revoked:
	// revoking it after the re-puts deletes keys deregistered meanwhile.
	orphan  clientv3.LeaseID
	status  registry.RegistrarStatus
	changed chan struct{} // closed and replaced on every state change
	// alarm is closed and replaced when the registrar closes or an
	// attempt fails or is the first to succeed after failures (setError):
	// what every Register waiting for its own entry (entry.done), and
	// every Deregister waiting for its own key, must also hear of. An
	// attempt that succeeds after a success changes nothing they read.
	alarm  chan struct{}
	closed bool

	// ls is the current lease's keepalive, nil without a lease. Only the
	// run loop writes it, with mu held; the loop reads it without mu,
	// every other goroutine with mu (leaseIDLocked).
	ls *lease

	// Owned by the run loop.
	clusterID uint64 // the cluster the keys were last written to
	lastWrite int64  // the revision of the last write seen there
	// down is the current outage: since the first failed attempt or the
	// lease's loss, until every instance is written again.
	down           outage
	registeredOnce bool // every instance was written once; later recoveries are "again"
	// txnOps is the most operations the loop puts in one transaction:
	// WithMaxTxnOps, lowered when etcd refuses a transaction as too large.
	txnOps int

	closeOnce sync.Once
	closeErr  error
}

type entry struct {
	key string
	val []byte
	// mirrors are the entry's copies in other layouts (WithMirror),
	// written and deleted with it.
	mirrors []mirrored
	// err is set when etcd refused the entry for good; it is then removed
	// from the desired set.
	err error
	// done is closed, under Registrar.mu, once the entry is written,
	// replaced, deregistered or refused: what its Register waits for.
	done    chan struct{}
	settled bool // done is closed
	// confirmed is set, under Registrar.mu, once etcd answered a
	// transaction that wrote the entry (keyset.wrote): a removal of an
	// entry only maybe written (an unanswered put) is deleted without
	// first being written Draining.
	confirmed bool
}

// settleLocked closes e.done, once. Registrar.mu must be held.
func (e *entry) settleLocked() {
	if !e.settled {
		e.settled = true
		close(e.done)
	}
}

// NewRegistrar returns a Registrar that uses cli. It does not contact etcd:
// it works while etcd is unreachable and registers as soon as etcd answers.
// The lease is granted when the first instance is registered. cli stays
// owned by the caller and must outlive the Registrar.
func NewRegistrar(cli *clientv3.Client, opts ...Option) (*Registrar, error) {
	if cli == nil {
		return nil, errors.New("etcd: NewRegistrar: nil client")
	}
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registrar{
		cli:     cli,
		opts:    o,
		log:     o.logger.With("component", "muster.registrar"),
		ctx:     ctx,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		keys:    newKeyset(),
		changed: make(chan struct{}),
		alarm:   make(chan struct{}),
		txnOps:  o.maxTxnOps,
	}
	r.status.Since = time.Now()
	go r.run()
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
	key := registry.Key(r.opts.prefix, in.Name, in.ID)

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return registry.ErrClosed
	}
	if in.RegisteredAt.IsZero() {
		in.RegisteredAt = time.Now()
		if prev := r.keys.wanted(key); prev != nil {
			if old, err := registry.Unmarshal(prev.val); err == nil {
				in.RegisteredAt = old.RegisteredAt
			}
		}
	}
	val, err := registry.Marshal(in)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	mirrors, err := r.mirrorsOf(in)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	e := &entry{key: key, val: val, mirrors: mirrors, done: make(chan struct{})}
	if prev := r.keys.wanted(key); prev != nil && string(prev.val) == string(val) {
		e = prev // unchanged: nothing to rewrite
	} else {
		prev := r.keys.want(e)
		replaced := prev != nil
		if replaced {
			prev.settleLocked()
		}
		// Waiters learn of a replaced value (their Register is
		// superseded) and of a change of Registered; a new key concerns
		// none of them, and waking them all on each of many concurrent
		// Registers would cost O(n²).
		if r.refreshStatusLocked() || replaced {
			r.broadcastLocked()
		}
	}
	r.mu.Unlock()
	r.kick()

	own := func() <-chan struct{} {
		if e.settled {
			// Written before a lost lease and registered again
			// unchanged: its next write settles nothing.
			return nil
		}
		return e.done
	}
	return r.await(ctx, own, func() (bool, error) {
		if r.keys.isWritten(e) {
			return true, nil
		}
		if r.keys.wanted(key) != e {
			// Refused by etcd, or replaced by a later Register.
			return true, e.err
		}
		return false, nil
	})
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
	key := registry.Key(r.opts.prefix, name, id)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return registry.ErrClosed
	}
	if e := r.keys.unwant(key); e != nil {
		e.settleLocked()
		r.updateStatusLocked()
	}
	r.mu.Unlock()
	r.kick()
	cond := func() (bool, error) { return r.keys.isGone(key), nil }
	if r.opts.hooks.broadcasts() {
		return r.await(ctx, nil, cond)
	}
	w := &goneWait{key: key}
	defer func() {
		r.mu.Lock()
		r.keys.leave(w)
		r.mu.Unlock()
	}()
	return r.await(ctx, func() <-chan struct{} { return r.keys.goneChan(w) }, cond)
}

// await waits until cond (called with r.mu held) reports done, ctx ends,
// the request timeout passes or the registrar closes. Given own (called
// with r.mu held after cond), it wakes when the channel own returns is
// closed or an alarm sounds, not on every change of the registrar's state:
// with many Registers or Deregisters waiting, a write wakes only its own
// callers. Without own, or when own returns nil, it wakes on every change.
func (r *Registrar) await(ctx context.Context, own func() <-chan struct{}, cond func() (bool, error)) error {
	timer := time.NewTimer(r.opts.requestTimeout)
	defer timer.Stop()
	var woken int64
	defer func() { r.opts.hooks.wokenUp(woken) }()
	for ; ; woken++ {
		r.mu.Lock()
		ok, err := cond()
		closed, changed, lastErr := r.closed, r.changed, r.status.LastError
		retrying := r.retryingLocked()
		var mine <-chan struct{}
		if own != nil && !ok && !closed && !retrying {
			if mine = own(); mine != nil {
				changed = r.alarm
			}
		}
		r.mu.Unlock()
		switch {
		case ok:
			return err
		case closed:
			return registry.ErrClosed
		}
		if retrying {
			// The last attempt failed and the next waits for its
			// backoff: no need to wait for the request timeout to
			// learn that etcd does not answer.
			return pendingError(errRetrying, lastErr)
		}
		select {
		case <-changed:
		case <-mine:
		case <-ctx.Done():
			return pendingError(ctx.Err(), lastErr)
		case <-timer.C:
			return pendingError(context.DeadlineExceeded, lastErr)
		}
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

// refused reports whether err is etcd refusing the client's identity: a
// password or token refused, a user name missing, permission denied.
func refused(err error) bool {
	for _, e := range []error{rpctypes.ErrAuthFailed, rpctypes.ErrInvalidAuthToken, rpctypes.ErrUserEmpty,
		rpctypes.ErrPermissionDenied, rpctypes.ErrAuthOldRevision} {
		if errors.Is(err, e) {
			return true
		}
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
func (r *Registrar) Status() registry.RegistrarStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// WaitRegistered blocks until every instance is written under a live lease
// (Status().Registered), ctx ends, or the registrar is closed.
func (r *Registrar) WaitRegistered(ctx context.Context) error {
	for {
		r.mu.Lock()
		ok, closed, changed := r.status.Registered, r.closed, r.changed
		r.mu.Unlock()
		switch {
		case ok:
			return nil
		case closed:
			return registry.ErrClosed
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops re-registration and revokes the lease, which deletes every key
// of this registrar at once. If etcd does not answer within the request
// timeout, the keys expire with the TTL instead and the error says so. Close
// is idempotent; later calls return the first call's result.
func (r *Registrar) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.broadcastLocked()
		r.alarmLocked()
		r.mu.Unlock()
		r.cancel()
		<-r.done

		r.mu.Lock()
		leases := []clientv3.LeaseID{r.leaseIDLocked(), r.orphan}
		r.ls, r.orphan = nil, 0
		// The keyset keeps what is written: those keys are in etcd
		// until the revocation below lands, so a Deregister of one that
		// wakes only now returns ErrClosed, not success.
		r.updateStatusLocked()
		r.mu.Unlock()
		var errs []error
		for _, id := range leases {
			if id == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), r.opts.requestTimeout)
			_, err := r.cli.Revoke(ctx, id)
			cancel()
			if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				errs = append(errs, fmt.Errorf("etcd: revoke lease %x: %w (its keys expire within the TTL)", int64(id), err))
			}
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

func (r *Registrar) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// broadcastLocked wakes every waiter of a state change. r.mu must be held.
func (r *Registrar) broadcastLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// alarmLocked wakes every waiter, those waiting for their own entry or
// key too.
// r.mu must be held.
func (r *Registrar) alarmLocked() {
	close(r.alarm)
	r.alarm = make(chan struct{})
}

// updateStatusLocked recomputes the derived status fields and wakes
// waiters. r.mu must be held.
func (r *Registrar) updateStatusLocked() {
	r.refreshStatusLocked()
	r.broadcastLocked()
}

// refreshStatusLocked recomputes the derived status fields and reports
// whether Registered changed. r.mu must be held.
func (r *Registrar) refreshStatusLocked() bool {
	pending := r.keys.pending()
	if r.closed {
		pending = r.keys.len() // no live lease holds any of them
	}
	st := &r.status
	st.Instances = r.keys.len()
	st.Pending = pending
	lease := r.leaseIDLocked()
	st.Session = int64(lease)
	registered := lease != 0 && pending == 0 && r.keys.len() > 0
	if registered == st.Registered {
		return false
	}
	st.Registered = registered
	st.Since = time.Now()
	return true
}

// retryingLocked reports whether the run loop's last attempt failed
// because etcd did not answer: until an attempt succeeds, etcd is believed
// unreachable. r.mu must be held.
func (r *Registrar) retryingLocked() bool { return unreachable(r.status.LastError) }

// setError records the outcome of an attempt of the run loop (err nil: it
// succeeded) and wakes the waiters it concerns.
func (r *Registrar) setError(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A failed attempt is news, and so is the end of failures.
	news := err != nil || r.status.LastError != nil
	r.status.LastError = err
	if err != nil {
		r.status.LastErrorAt = time.Now()
		r.status.Failures++
		if refused(err) {
			r.status.Refusals++
		}
	}
	r.broadcastLocked()
	if news {
		r.alarmLocked()
	}
}

// leaseIDLocked returns the current lease, 0 without one. r.mu must be
// held, or the caller must be the run loop.
func (r *Registrar) leaseIDLocked() clientv3.LeaseID {
	if r.ls == nil {
		return 0
	}
	return r.ls.id
}
