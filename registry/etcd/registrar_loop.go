package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/backoff"
	"github.com/musterhq/muster/registry"
)

// errLeaseLost reports that the lease ended while the registrar used it.
var errLeaseLost = errors.New("etcd: lease lost")

// run is the registrar's only writer to etcd. It reconciles the desired set
// with etcd, and on a failure retries with backoff until Close. It owns
// r.ls and the watches of the registrar's own keys.
func (r *Registrar) run() {
	defer close(r.done)
	bo := backoff.New(r.opts.backoffMin, r.opts.backoffMax)
	retry := time.NewTimer(0)
	<-retry.C
	audit := time.NewTicker(r.opts.auditEvery)
	defer audit.Stop()
	own := newOwnKeys(r)
	defer own.stop()
	defer func() {
		if r.ls != nil {
			r.ls.stop()
		}
	}()
	var retryC <-chan time.Time
	for {
		if retryC == nil {
			start := time.Now()
			err := r.reconcile()
			r.setError(err)
			if err != nil {
				if r.ctx.Err() != nil {
					return
				}
				// The backoff counts from the attempt's start: an
				// attempt that waited for etcd to answer has waited
				// already.
				d := max(bo.Next()-time.Since(start), 0)
				r.down.fail(start)
				now := time.Now()
				r.log.Warn("registration incomplete; retrying", "error", err,
					"failing_for", seconds(r.down.length(now)), "next_attempt_in", d.Round(time.Millisecond))
				if bound := stuckTTLs * r.opts.ttl; r.down.longer(now, bound) {
					r.stuck(err, bound)
				}
				retry.Reset(d)
				retryC = retry.C
			} else {
				bo.Reset()
				r.logRecovery()
			}
			own.follow(r.writtenServices())
		}
		var leaseDone <-chan struct{}
		if r.ls != nil {
			leaseDone = r.ls.Done()
		}
		select {
		case <-r.ctx.Done():
			retry.Stop()
			return
		case <-r.wake:
			// A Register or Deregister arrived, or a key of ours was
			// deleted. While a retry is scheduled it waits for the
			// timer: the backoff still holds.
		case <-retryC:
			retryC = nil
		case <-audit.C:
			if retryC == nil {
				if err := r.audit(); err != nil && r.ctx.Err() == nil {
					r.log.Debug("audit of registered keys failed; trying again later", "error", err)
				}
			}
		case <-own.restarted:
			// A watch of our keys was re-opened: deletions meanwhile
			// were not seen.
			if retryC == nil {
				if err := r.audit(); err != nil && r.ctx.Err() == nil {
					r.log.Debug("audit of registered keys failed; trying again later", "error", err)
				}
			}
		case <-leaseDone:
			if r.ctx.Err() != nil {
				return
			}
			if r.ls.left(time.Now()) <= 0 {
				// A revocation (TTL left) is logged by leaseLost.
				r.log.Warn("lease lost; re-registering under a new lease", "error", r.ls.Err())
			}
			lost := time.Now()
			if errors.Is(r.ls.Err(), errLeaseExpired) {
				// No renewal answered for a whole TTL: the outage
				// began with the last renewal etcd answered.
				lost = lost.Add(-r.ls.ttl)
			}
			r.down.fail(lost)
			r.leaseLost()
		}
	}
}

// logRecovery logs, once per outage, that the registrar is back after one:
// every instance written again under a live lease, with how long it took.
// An outage counts from the first failed attempt or, when the lease
// expired unrenewed, from the last renewal etcd answered.
// Called by the run loop after a reconcile succeeded.
func (r *Registrar) logRecovery() {
	st := r.Status()
	if st.Instances > 0 && !st.Registered {
		return // a Register arrived meanwhile; the next reconcile ends the outage
	}
	d, failures, ok := r.down.end(time.Now())
	switch {
	case !ok:
	case st.Instances == 0:
		// No request may have been made: nothing says etcd answered.
		r.log.Info("nothing left to register", "failing_for", seconds(d), "failed_attempts", failures)
	case r.registeredOnce:
		r.log.Info("registered again after an outage", "instances", st.Instances,
			"outage", seconds(d), "failed_attempts", failures, "lease", fmt.Sprintf("%x", st.Session))
	default:
		r.log.Info("registered once etcd answered", "instances", st.Instances,
			"waited", seconds(d), "failed_attempts", failures, "lease", fmt.Sprintf("%x", st.Session))
	}
	if st.Registered {
		r.registeredOnce = true
	}
}

// stuckTTLs is how many lease TTLs registration may fail before the
// registrar says plainly that its instances are gone from etcd: by then
// the lease it had has expired.
const stuckTTLs = 3

// stuck logs, at error level, that registration has failed for longer
// than bound, with err, the last attempt's error, and what it means.
func (r *Registrar) stuck(err error, bound time.Duration) {
	st := r.Status()
	if st.Instances == 0 {
		return
	}
	why := "etcd refuses the requests"
	switch {
	case refused(err):
		why = "etcd refuses this client's identity: check its user, password or certificate, and its role's permissions"
	case unreachable(err):
		why = "etcd does not answer"
	}
	r.log.Error("registration has failed for longer than "+bound.String()+" ("+strconv.Itoa(stuckTTLs)+
		" lease TTLs): the instances are not in etcd, and clients no longer see them", "cause", why, "error", err,
		"instances", st.Instances, "failed_attempts", st.Failures)
}

// reconcile brings etcd to the desired set: it grants a lease if needed,
// deletes deregistered keys, writes new or changed values, and revokes a
// lease lost earlier. It returns the first error that stops it.
func (r *Registrar) reconcile() error {
	r.mu.Lock()
	lease, orphan, want := r.leaseIDLocked(), r.orphan, r.keys.len()
	r.mu.Unlock()

	if lease == 0 {
		if want == 0 {
			return nil
		}
		var err error
		if lease, err = r.grant(); err != nil {
			return err
		}
	}
	// A deletion etcd refuses (a narrowed role, a limit of operations too
	// low for the key's copies) is retried on every attempt, and holds back
	// no write: only an error that stops every write (a lost lease, an
	// unreachable etcd, Close) ends the attempt here.
	delErr := r.deleteRemoved(lease)
	if delErr != nil && stopsWrites(delErr) {
		return delErr
	}
	if err := r.putPending(lease); err != nil {
		return errors.Join(err, delErr)
	}
	// A Deregister that raced with a put above left a key to delete.
	if err := r.deleteRemoved(lease); err != nil {
		return err
	}
	if delErr != nil {
		return delErr
	}
	if orphan != 0 {
		// Keys re-put above are bound to the new lease; what is still
		// bound to the old one was deregistered meanwhile.
		ctx, cancel := context.WithTimeout(r.ctx, r.opTimeout())
		_, err := r.cli.Revoke(ctx, orphan)
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("etcd: revoke lost lease %x: %w", int64(orphan), err)
		}
		r.mu.Lock()
		if r.orphan == orphan {
			r.orphan = 0
		}
		r.mu.Unlock()
	}
	return nil
}

// grant obtains a new lease and starts keeping it alive.
func (r *Registrar) grant() (clientv3.LeaseID, error) {
	ls, err := grantLease(r.ctx, r.cli, r.opts.ttl, r.opTimeout(), r.log)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	if r.status.Session != 0 || r.orphan != 0 {
		r.status.Reregistrations++
	}
	r.ls = ls
	r.updateStatusLocked()
	r.mu.Unlock()
	r.log.Debug("lease granted", "lease", fmt.Sprintf("%x", int64(ls.id)), "ttl", ls.ttl)
	return ls.id, nil
}

// leaseLost forgets the current lease; the next reconcile grants a new one
// and rewrites every key.
func (r *Registrar) leaseLost() {
	revoked := time.Duration(0)
	if r.ls != nil {
		revoked = r.ls.left(time.Now())
		r.ls.stop()
	}
	r.mu.Lock()
	lease := r.leaseIDLocked()
	r.ls = nil
	if revoked > 0 && lease != 0 {
		// etcd ended the lease while the renewals it answered still
		// kept it: a revocation, not an expiry.
		r.status.Revocations++
	}
	if lease != 0 {
		r.orphan = lease
	}
	r.keys.forgetWritten()
	r.updateStatusLocked()
	r.mu.Unlock()
	if revoked > 0 && lease != 0 {
		r.log.Warn("etcd revoked this registrar's lease while it was kept alive; re-registering under a new lease "+
			"(revoked by hand, or by a member that led the cluster and was paused for longer than the TTL: "+
			"on resuming it revokes the leases it believes expired)",
			"lease", fmt.Sprintf("%x", int64(lease)), "ttl_left", revoked.Round(time.Millisecond))
	}
}

// deleteRemoved deletes keys written under lease whose instance was
// deregistered, with their overrides and their copies in other layouts
// (WithMirror), many keys per transaction. A key, and each copy, is
// deleted only while it is still bound to lease (a nested transaction per
// key compares its lease), so a key taken over by another process is left
// alone; the copies still bound to lease go even when the key itself is
// gone or taken over.
func (r *Registrar) deleteRemoved(lease clientv3.LeaseID) error {
	return writeInBatches(r, r.removedEntries(), batchWrite[removal]{
		cost: func(d removal) txnCost {
			copies := len(d.written.mirrors)
			return txnCost{ops: 1, depth: 2 + copies + min(copies, 1), bytes: 2 * len(d.key)}
		},
		commit:  func(b []removal) error { return r.deleteBatch(lease, b) },
		refused: func(_ removal, err error) error { return err },
	})
}

// removal is a key to delete and the entry last written there.
type removal struct {
	key     string
	written *entry // nil if unknown
	// confirmed: etcd answered the write of written (not a put that
	// may or may not have landed).
	confirmed bool
}

func (r *Registrar) deleteBatch(lease clientv3.LeaseID, b []removal) error {
	if err := r.retireBatch(lease, b); err != nil && stopsWrites(err) {
		return err
	}
	ops := make([]clientv3.Op, 0, len(b))
	keys := make([]string, 0, len(b))
	for _, d := range b {
		copies := d.written.mirrorDeletes(lease)
		then := append([]clientv3.Op{clientv3.OpDelete(d.key), clientv3.OpDelete(overrideKey(d.key))}, copies...)
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(d.key), "=", lease)}, then, copies))
		keys = append(keys, d.key)
	}
	resp, err := r.commit(ops)
	if err != nil {
		return fmt.Errorf("etcd: delete %s: %w", describeKeys(keys), err)
	}
	r.wrote(resp.Header)
	r.mu.Lock()
	for _, key := range keys {
		if r.keys.wanted(key) == nil {
			r.keys.unwrite(key)
		}
	}
	r.updateStatusLocked()
	r.mu.Unlock()
	return nil
}

// commit runs one transaction of ops within the loop's request timeout.
func (r *Registrar) commit(ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.opTimeout())
	defer cancel()
	return r.cli.Txn(ctx).Then(ops...).Commit()
}

// retireBatch writes the instances of b that were written serving (etcd
// confirmed the write) Draining, each only while its key is still bound
// to lease, in one transaction before the one that deletes them: a Discovery then sees
// each deleted while Draining, a deliberate departure (Snapshot.Retired),
// which clients release at once, where they hold an instance deleted while
// serving for a grace (etcd revokes live leases after a paused leader
// resumes). Its failure only costs that: the deletion goes on unless
// etcd is unreachable or the lease lost.
func (r *Registrar) retireBatch(lease clientv3.LeaseID, b []removal) error {
	var ops []clientv3.Op
	for _, d := range b {
		if !d.confirmed {
			continue // maybe never written: nothing to drain
		}
		in, err := registry.Unmarshal(d.written.val)
		if err != nil || in.Draining {
			continue
		}
		in.Draining = true
		val, err := registry.Marshal(in)
		if err != nil {
			continue
		}
		put := clientv3.OpPut(d.key, string(val), clientv3.WithLease(lease))
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(d.key), "=", lease)}, []clientv3.Op{put}, nil))
	}
	if len(ops) == 0 {
		return nil
	}
	resp, err := r.commit(ops)
	if err != nil {
		return fmt.Errorf("etcd: drain %d keys before deleting them: %w", len(ops), err)
	}
	r.wrote(resp.Header)
	return nil
}

func (r *Registrar) removedEntries() []removal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys.removals()
}

// putPending writes every entry not yet written under lease, many per
// transaction, each with its copies in other layouts (WithMirror) in the
// same transaction. An entry etcd refuses for good (permission denied,
// value too large) is dropped, and its Register learns why.
func (r *Registrar) putPending(lease clientv3.LeaseID) error {
	r.mu.Lock()
	rebind := r.orphan != 0 // re-registering after a lost lease
	r.mu.Unlock()
	return writeInBatches(r, r.pendingEntries(), batchWrite[*entry]{
		cost: func(e *entry) txnCost {
			c := txnCost{ops: 1 + len(e.mirrors), bytes: e.size()}
			if rebind {
				c.ops++ // the read of its override
			}
			return c
		},
		commit:  func(b []*entry) error { return r.putBatch(lease, b, rebind) },
		refused: r.drop,
	})
}

// putBatch writes the entries of b that are still current in one
// transaction. With rebind (re-registering after a lost lease) the same
// transaction reads each entry's override, and overrides still bound to
// another lease are moved onto lease.
func (r *Registrar) putBatch(lease clientv3.LeaseID, b []*entry, rebind bool) error {
	r.mu.Lock()
	cur := make([]*entry, 0, len(b))
	for _, e := range b {
		if r.keys.wanted(e.key) == e {
			cur = append(cur, e) // else replaced or deregistered since the list was taken
			r.keys.begin(e.key)
		}
	}
	r.mu.Unlock()
	if len(cur) == 0 {
		return nil
	}
	defer r.landed(cur)
	ops := make([]clientv3.Op, 0, len(cur)*2)
	keys := make([]string, 0, len(cur))
	for _, e := range cur {
		ops = append(ops, e.putOps(lease)...)
		if rebind {
			ops = append(ops, clientv3.OpGet(overrideKey(e.key)))
		}
		keys = append(keys, e.key)
	}
	resp, err := r.commit(ops)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		r.leaseLost()
		return fmt.Errorf("etcd: put %s: %w: %w", describeKeys(keys), errLeaseLost, err)
	case err != nil:
		if unreachable(err) {
			r.mayHaveLanded(cur)
		}
		return fmt.Errorf("etcd: put %s: %w", describeKeys(keys), err)
	}
	r.wrote(resp.Header)
	if rebind {
		if err := r.rebindOverrides(lease, resp.Responses); err != nil {
			return err
		}
	}
	r.mu.Lock()
	for _, e := range cur {
		// Recorded even if the entry was deregistered meanwhile, so that
		// deleteRemoved removes the key just written.
		r.keys.wrote(e, resp.Header.Revision)
		e.settleLocked()
	}
	r.updateStatusLocked()
	r.mu.Unlock()
	return nil
}

// mayHaveLanded records the entries of cur deregistered meanwhile as
// written, after a transaction etcd did not answer (a timeout, a lost
// connection): it may still have been applied, and its keys would then
// stay, bound to the live lease, with nothing left to delete them. As
// written and not wanted, each key gets the deletion guarded by the lease
// (which deletes nothing if the transaction was not applied), and its
// Deregister waits for that.
func (r *Registrar) mayHaveLanded(cur []*entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range cur {
		r.keys.mayHaveWritten(e)
	}
}

// landed ends the transaction in flight for cur's keys, written or not,
// and wakes the Deregisters waiting for it.
func (r *Registrar) landed(cur []*entry) {
	r.mu.Lock()
	for _, e := range cur {
		r.keys.land(e.key)
	}
	if r.opts.hooks.broadcasts() {
		r.broadcastLocked() // the old wait, kept for tests: Deregisters wake on every change
	}
	r.mu.Unlock()
}

// drop removes e, which etcd refused for good (err), from the desired set;
// its Register returns the error.
func (r *Registrar) drop(e *entry, err error) error {
	if errors.Is(err, rpctypes.ErrRequestTooLarge) {
		err = fmt.Errorf("%w: the instance's keys and values (with its copies, WithMirror) are %d bytes, more than etcd takes in a request (its --max-request-bytes)", err, e.size())
	}
	r.log.Error("etcd refused the registration; dropping it", "key", e.key, "error", err)
	r.mu.Lock()
	if r.keys.wanted(e.key) == e {
		e.err = err
		r.keys.unwant(e.key)
		e.settleLocked()
	}
	r.updateStatusLocked()
	r.mu.Unlock()
	return nil
}

// rebindOverrides moves the operators' overrides read in a transaction's
// responses that are bound to another lease onto lease, the new lease
// their keys were just written under, so that they survive the
// re-registration (the lost lease is revoked next). A value is kept as it
// is; an override changed meanwhile is left alone.
func (r *Registrar) rebindOverrides(lease clientv3.LeaseID, responses []*pb.ResponseOp) error {
	var moves []*mvccpb.KeyValue
	for _, op := range responses {
		rr := op.GetResponseRange()
		if rr == nil {
			continue
		}
		for _, kv := range rr.Kvs {
			if clientv3.LeaseID(kv.Lease) != lease {
				moves = append(moves, kv)
			}
		}
	}
	return writeInBatches(r, moves, batchWrite[*mvccpb.KeyValue]{
		cost: func(kv *mvccpb.KeyValue) txnCost {
			return txnCost{ops: 1, depth: 1, bytes: len(kv.Key) + len(kv.Value)}
		},
		commit: func(b []*mvccpb.KeyValue) error {
			ops := make([]clientv3.Op, 0, len(b))
			keys := make([]string, 0, len(b))
			for _, kv := range b {
				okey := string(kv.Key)
				ops = append(ops, clientv3.OpTxn(
					[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(okey), "=", kv.ModRevision)},
					[]clientv3.Op{clientv3.OpPut(okey, string(kv.Value), clientv3.WithLease(lease))}, nil))
				keys = append(keys, okey)
			}
			ctx, cancel := context.WithTimeout(r.ctx, r.opTimeout())
			defer cancel()
			if _, err := r.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				return fmt.Errorf("etcd: keep override %s: %w", describeKeys(keys), err)
			}
			return nil
		},
		refused: func(_ *mvccpb.KeyValue, err error) error { return err },
	})
}

// overrideKey returns the key of the operator's override of key.
func overrideKey(key string) string { return key + "/" + registry.OverrideSuffix }

func (r *Registrar) pendingEntries() []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys.toWriteEntries()
}

// permanent reports whether etcd refused a write for what it holds, a
// reason retrying the same request cannot fix: a transaction of several
// instances is split (writeInBatches), a single one dropped.
func permanent(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) ||
		errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		errors.Is(err, rpctypes.ErrKeyNotFound) ||
		errors.Is(err, rpctypes.ErrTooManyOps) ||
		errors.Is(err, rpctypes.ErrDuplicateKey)
}

// opTimeout bounds each etcd request of the run loop: the request timeout
// less a tenth (at most 250ms), so that a failed attempt is recorded, and
// its cause reaches the ErrPending of a Register waiting for the same
// request timeout, before that Register gives up.
func (r *Registrar) opTimeout() time.Duration {
	return r.opts.requestTimeout - min(r.opts.requestTimeout/10, 250*time.Millisecond)
}
