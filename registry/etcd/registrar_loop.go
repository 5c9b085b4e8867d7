package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/backoff"
	"github.com/musterhq/muster/registry"
)

// errLeaseLost reports that the lease ended while the registrar used it.
var errLeaseLost = errors.New("etcd: lease lost")

// loop is a Registrar's run loop: the only writer to etcd, and the only
// owner of the set of instances, the lease, and the calls waiting for their
// keys. Its fields are read and written by its goroutine only, without a
// lock; what other goroutines see of it is the status it publishes
// (Registrar.state) and the answers it sends to calls.
type loop struct {
	r    *Registrar
	cli  *clientv3.Client
	opts options
	log  *slog.Logger
	ctx  context.Context // ended by Close

	// keys is the desired set, what is written under the lease, and the
	// work list between the two (registrar_keyset.go).
	keys keyset
	// waits holds the calls waiting for their keys (registrar_waits.go).
	waits waits
	// ls is the current lease's keepalive, nil without a lease.
	ls *lease
	// orphan is a lease the loop believes lost but has not revoked:
	// revoking it after the re-puts deletes keys deregistered meanwhile.
	orphan clientv3.LeaseID
	// status is what the loop publishes; untilRegistered holds the
	// WaitRegistered calls, answered once status.Registered is true.
	status          registry.RegistrarStatus
	untilRegistered []*call
	// replies are the answers to send once the status they follow from
	// is published: a caller that returns reads at least that status.
	replies []reply

	clusterID uint64 // the cluster the keys were last written to
	lastWrite int64  // the revision of the last write seen there
	// down is the current outage: since the first failed attempt or the
	// lease's loss, until every instance is written again.
	down           outage
	registeredOnce bool // every instance was written once; later recoveries are "again"
	// txnOps is the most operations the loop puts in one transaction:
	// WithMaxTxnOps, lowered when etcd refuses a transaction as too large.
	txnOps int
	// own watches the deletions of the registrar's keys.
	own *ownKeys
	// closeErr is Close's result, set before Registrar.done is closed.
	closeErr error
}

func newLoop(ctx context.Context, cli *clientv3.Client, r *Registrar) *loop {
	l := &loop{
		r:      r,
		cli:    cli,
		opts:   r.opts,
		log:    r.opts.logger.With("component", "muster.registrar"),
		ctx:    ctx,
		keys:   newKeyset(),
		waits:  make(waits),
		txnOps: r.opts.maxTxnOps,
	}
	l.status.Since = time.Now()
	l.publish()
	return l
}

// run reconciles the desired set with etcd, and on a failure retries with
// backoff until Close. It is the loop's goroutine: it takes every call and
// event from the inbox, and owns the lease and the watches of the
// registrar's own keys.
func (l *loop) run() {
	defer close(l.r.done)
	defer l.shutdown()
	bo := backoff.New(l.opts.backoffMin, l.opts.backoffMax)
	retry := time.NewTimer(0)
	<-retry.C
	defer retry.Stop()
	audit := time.NewTicker(l.opts.auditEvery)
	defer audit.Stop()
	l.own = newOwnKeys(l)
	var retryC <-chan time.Time
	for {
		if retryC == nil {
			// Every call queued so far counts in this attempt, even
			// when the retry timer fired with calls waiting.
			l.takeInbox(true)
			start := time.Now()
			err := l.reconcile()
			l.setError(err)
			if err != nil {
				if l.ctx.Err() != nil {
					return
				}
				// The backoff counts from the attempt's start: an
				// attempt that waited for etcd to answer has waited
				// already.
				d := max(bo.Next()-time.Since(start), 0)
				l.down.fail(start)
				now := time.Now()
				l.log.Warn("registration incomplete; retrying", "error", err,
					"failing_for", seconds(l.down.length(now)), "next_attempt_in", d.Round(time.Millisecond))
				if bound := stuckTTLs * l.opts.ttl; l.down.longer(now, bound) {
					l.stuck(err, bound)
				}
				retry.Reset(d)
				retryC = retry.C
			} else {
				bo.Reset()
				l.logRecovery()
			}
			l.own.follow(l.writtenServices())
		}
		var leaseDone <-chan struct{}
		if l.ls != nil {
			leaseDone = l.ls.Done()
		}
		select {
		case <-l.ctx.Done():
			return
		case <-l.r.inbox.ready:
			// Calls, or events of the watches of our keys. While a
			// retry is scheduled the writes wait for the timer: the
			// backoff still holds.
			l.takeInbox(retryC == nil)
		case <-retryC:
			retryC = nil
		case <-audit.C:
			if retryC == nil {
				l.auditOrLog()
			}
		case <-leaseDone:
			if l.ctx.Err() != nil {
				return
			}
			if l.ls.left(time.Now()) <= 0 {
				// A revocation (TTL left) is logged by leaseLost.
				l.log.Warn("lease lost; re-registering under a new lease", "error", l.ls.Err())
			}
			lost := time.Now()
			if errors.Is(l.ls.Err(), errLeaseExpired) {
				// No renewal answered for a whole TTL: the outage
				// began with the last renewal etcd answered.
				lost = lost.Add(-l.ls.ttl)
			}
			l.down.fail(lost)
			l.leaseLost()
		}
	}
}

// takeInbox applies every message queued in the inbox, then publishes.
// auditable is false while a retry waits for its backoff.
func (l *loop) takeInbox(auditable bool) {
	ms := l.r.inbox.take()
	if len(ms) == 0 {
		return
	}
	for _, m := range ms {
		l.handle(m, auditable)
	}
	l.publish()
}

// handle applies one message of the inbox. auditable is false while a
// retry waits for its backoff.
func (l *loop) handle(m message, auditable bool) {
	switch {
	case m.call != nil && m.call.in != nil:
		l.register(m.call)
	case m.call != nil && m.call.key != "":
		l.deregister(m.call)
	case m.call != nil:
		l.waitRegistered(m.call)
	case m.reopened:
		// A watch of our keys was opened again (deletions meanwhile
		// were not seen), or it saw etcd below our last write.
		if auditable {
			l.auditOrLog()
		}
	default:
		l.keysDeleted(m.deleted)
	}
}

func (l *loop) auditOrLog() {
	if err := l.audit(); err != nil && l.ctx.Err() == nil {
		l.log.Debug("audit of registered keys failed; trying again later", "error", err)
	}
}

// register makes c's instance the desired entry of its key (unless it is
// unchanged) and answers c once that entry is written or refused.
func (l *loop) register(c *call) {
	in := *c.in
	prev := l.keys.wanted(c.key)
	if in.RegisteredAt.IsZero() {
		in.RegisteredAt = time.Now()
		if prev != nil {
			if old, err := registry.Unmarshal(prev.val); err == nil {
				in.RegisteredAt = old.RegisteredAt
			}
		}
	}
	val, err := registry.Marshal(in)
	if err != nil {
		l.reply(c, err)
		return
	}
	mirrors, err := l.mirrorsOf(in)
	if err != nil {
		l.reply(c, err)
		return
	}
	c.e = prev
	if prev == nil || string(prev.val) != string(val) {
		c.e = &entry{key: c.key, val: val, mirrors: mirrors}
		if l.keys.want(c.e) != nil {
			l.settle(c.key) // the Registers of the value replaced return
		}
	}
	l.wait(c)
}

// deregister removes c's key from the desired set and answers c once the
// key is gone.
func (l *loop) deregister(c *call) {
	if l.keys.unwant(c.key) != nil {
		l.settle(c.key) // the Registers of the value removed return
	}
	l.wait(c)
}

// wait answers c now if it is settled or etcd is believed unreachable, and
// otherwise keeps it until its key settles it.
func (l *loop) wait(c *call) {
	switch done, err := l.settled(c); {
	case done:
		l.reply(c, err)
	case unreachable(l.status.LastError):
		l.reply(c, pendingError(errRetrying, l.status.LastError))
	default:
		l.waits.add(c, time.Now())
	}
}

// settled reports whether c has its outcome, and which: a Register's
// entry written (nil), replaced or removed (nil), or refused by etcd (why);
// a Deregister's key no longer written under the lease.
func (l *loop) settled(c *call) (bool, error) {
	if c.in == nil {
		return l.keys.isGone(c.key), nil
	}
	if l.keys.isWritten(c.e) {
		return true, nil
	}
	if l.keys.wanted(c.key) != c.e {
		return true, c.e.err
	}
	return false, nil
}

// settle answers the calls waiting for key that have their outcome.
func (l *loop) settle(key string) { l.waits.settle(key, l.settled, l.reply) }

// waitRegistered answers c once the registrar is registered. Its caller
// waits on until its ctx ends, so calls that gave up are forgotten here.
func (l *loop) waitRegistered(c *call) {
	now := time.Now()
	kept := l.untilRegistered[:0]
	for _, o := range l.untilRegistered {
		if !o.gaveUp(now) {
			kept = append(kept, o)
		}
	}
	clear(l.untilRegistered[len(kept):])
	l.untilRegistered = append(kept, c)
}

// reply is the answer to a call, sent when the loop next publishes.
type reply struct {
	c   *call
	err error
}

// reply queues the answer err to c, to be sent once the status that
// follows from it is published.
func (l *loop) reply(c *call, err error) { l.replies = append(l.replies, reply{c, err}) }

// setError records the outcome of an attempt (err nil: it succeeded) and
// publishes it. After an attempt etcd did not answer, every waiting call
// returns at once: the next attempt waits for its backoff.
func (l *loop) setError(err error) {
	l.status.LastError = err
	if err != nil {
		l.status.LastErrorAt = time.Now()
		l.status.Failures++
		if IdentityRefused(err) {
			l.status.Refusals++
		}
	}
	if unreachable(err) && l.ctx.Err() == nil {
		l.waits.answerAll(pendingError(errRetrying, err), l.reply)
	}
	l.publish()
}

// publish recomputes the derived status fields, publishes the status, and
// then sends the answers it settles.
func (l *loop) publish() {
	closed := l.ctx.Err() != nil
	pending := l.keys.pending()
	if closed {
		pending = l.keys.len() // no live lease holds any of them
	}
	st := &l.status
	st.Instances = l.keys.len()
	st.Pending = pending
	st.Session = int64(l.leaseID())
	if registered := st.Session != 0 && pending == 0 && st.Instances > 0; registered != st.Registered {
		st.Registered = registered
		st.Since = time.Now()
	}
	if st.Registered {
		for _, c := range l.untilRegistered {
			l.reply(c, nil)
		}
		l.untilRegistered = nil
	}
	published := *st
	l.r.state.Store(&published)
	for _, a := range l.replies {
		a.c.reply <- a.err // capacity 1, one answer per call: never blocks
	}
	clear(l.replies)
	l.replies = l.replies[:0]
}

// shutdown ends the loop at Close: every call waiting or queued returns
// ErrClosed, the watches and the keepalive stop, and the leases are
// revoked, which deletes every key at once.
func (l *loop) shutdown() {
	for _, m := range l.r.inbox.take() {
		if m.call != nil {
			l.reply(m.call, registry.ErrClosed)
		}
	}
	// The keyset keeps what is written: those keys are in etcd until
	// the revocation below lands, so a Deregister of one returns
	// ErrClosed, not success.
	l.waits.answerAll(registry.ErrClosed, l.reply)
	for _, c := range l.untilRegistered {
		l.reply(c, registry.ErrClosed)
	}
	l.untilRegistered = nil
	if l.own != nil {
		l.own.stop()
	}
	leases := []clientv3.LeaseID{l.leaseID(), l.orphan}
	if l.ls != nil {
		l.ls.stop()
	}
	l.ls, l.orphan = nil, 0
	l.publish()
	var errs []error
	for _, id := range leases {
		if id == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.requestTimeout)
		_, err := l.cli.Revoke(ctx, id)
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs = append(errs, fmt.Errorf("etcd: revoke lease %x: %w (its keys expire within the TTL)", int64(id), err))
		}
	}
	l.closeErr = errors.Join(errs...)
}

// leaseID returns the current lease, 0 without one.
func (l *loop) leaseID() clientv3.LeaseID {
	if l.ls == nil {
		return 0
	}
	return l.ls.id
}

// logRecovery logs, once per outage, that the registrar is back after one:
// every instance written again under a live lease, with how long it took.
// An outage counts from the first failed attempt or, when the lease
// expired unrenewed, from the last renewal etcd answered.
// Called by the run loop after a reconcile succeeded.
func (l *loop) logRecovery() {
	st := l.status
	if st.Instances > 0 && !st.Registered {
		return // a Register arrived meanwhile; the next reconcile ends the outage
	}
	d, failures, ok := l.down.end(time.Now())
	switch {
	case !ok:
	case st.Instances == 0:
		// No request may have been made: nothing says etcd answered.
		l.log.Info("nothing left to register", "failing_for", seconds(d), "failed_attempts", failures)
	case l.registeredOnce:
		l.log.Info("registered again after an outage", "instances", st.Instances,
			"outage", seconds(d), "failed_attempts", failures, "lease", fmt.Sprintf("%x", st.Session))
	default:
		l.log.Info("registered once etcd answered", "instances", st.Instances,
			"waited", seconds(d), "failed_attempts", failures, "lease", fmt.Sprintf("%x", st.Session))
	}
	if st.Registered {
		l.registeredOnce = true
	}
}

// stuckTTLs is how many lease TTLs registration may fail before the
// registrar says plainly that its instances are gone from etcd: by then
// the lease it had has expired.
const stuckTTLs = 3

// stuck logs, at error level, that registration has failed for longer
// than bound, with err, the last attempt's error, and what it means.
func (l *loop) stuck(err error, bound time.Duration) {
	st := l.status
	if st.Instances == 0 {
		return
	}
	why := "etcd refuses the requests"
	switch {
	case IdentityRefused(err):
		why = "etcd refuses this client's identity: check its user, password or certificate, and its role's permissions"
	case unreachable(err):
		why = "etcd does not answer"
	}
	l.log.Error("registration has failed for longer than "+bound.String()+" ("+strconv.Itoa(stuckTTLs)+
		" lease TTLs): the instances are not in etcd, and clients no longer see them", "cause", why, "error", err,
		"instances", st.Instances, "failed_attempts", st.Failures)
}

// reconcile brings etcd to the desired set: it grants a lease if needed,
// deletes deregistered keys, writes new or changed values, and revokes a
// lease lost earlier. It returns the first error that stops it.
func (l *loop) reconcile() error {
	lease, orphan, want := l.leaseID(), l.orphan, l.keys.len()

	if lease == 0 {
		if want == 0 {
			return nil
		}
		var err error
		if lease, err = l.grant(); err != nil {
			return err
		}
	}
	// A deletion etcd refuses (a narrowed role, a limit of operations too
	// low for the key's copies) is retried on every attempt, and holds back
	// no write: only an error that stops every write (a lost lease, an
	// unreachable etcd, Close) ends the attempt here.
	delErr := l.deleteRemoved(lease)
	if delErr != nil && stopsWrites(delErr) {
		return delErr
	}
	if err := l.putPending(lease); err != nil {
		return errors.Join(err, delErr)
	}
	// An instance dropped above (etcd refused it) that an earlier,
	// unanswered put may have written left a key to delete.
	if err := l.deleteRemoved(lease); err != nil {
		return err
	}
	if delErr != nil {
		return delErr
	}
	if orphan != 0 {
		// Keys re-put above are bound to the new lease; what is still
		// bound to the old one was deregistered meanwhile.
		ctx, cancel := context.WithTimeout(l.ctx, l.opTimeout())
		_, err := l.cli.Revoke(ctx, orphan)
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("etcd: revoke lost lease %x: %w", int64(orphan), err)
		}
		l.orphan = 0
	}
	return nil
}

// grant obtains a new lease and starts keeping it alive.
func (l *loop) grant() (clientv3.LeaseID, error) {
	ls, err := grantLease(l.ctx, l.cli, l.opts.ttl, l.opTimeout(), l.log)
	if err != nil {
		return 0, err
	}
	if l.status.Session != 0 || l.orphan != 0 {
		l.status.Reregistrations++
	}
	l.ls = ls
	l.publish()
	l.log.Debug("lease granted", "lease", fmt.Sprintf("%x", int64(ls.id)), "ttl", ls.ttl)
	return ls.id, nil
}

// leaseLost forgets the current lease; the next reconcile grants a new one
// and rewrites every key.
func (l *loop) leaseLost() {
	revoked := time.Duration(0)
	if l.ls != nil {
		revoked = l.ls.left(time.Now())
		l.ls.stop()
	}
	lease := l.leaseID()
	l.ls = nil
	if revoked > 0 && lease != 0 {
		// etcd ended the lease while the renewals it answered still
		// kept it: a revocation, not an expiry.
		l.status.Revocations++
	}
	if lease != 0 {
		l.orphan = lease
	}
	l.keys.forgetWritten()
	// A Deregister returns once its key is not written under the new
	// lease: the old lease's keys go with it.
	l.waits.settleAll(l.settled, l.reply)
	l.publish()
	if revoked > 0 && lease != 0 {
		l.log.Warn("etcd revoked this registrar's lease while it was kept alive; re-registering under a new lease "+
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
func (l *loop) deleteRemoved(lease clientv3.LeaseID) error {
	return writeInBatches(l, l.removedEntries(), batchWrite[removal]{
		cost: func(d removal) txnCost {
			copies := len(d.written.mirrors)
			return txnCost{ops: 1, depth: 2 + copies + min(copies, 1), bytes: 2 * len(d.key)}
		},
		commit:  func(b []removal) error { return l.deleteBatch(lease, b) },
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

func (l *loop) deleteBatch(lease clientv3.LeaseID, b []removal) error {
	if err := l.retireBatch(lease, b); err != nil && stopsWrites(err) {
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
	resp, err := l.commit(ops)
	if err != nil {
		return fmt.Errorf("etcd: delete %s: %w", describeKeys(keys), err)
	}
	l.wrote(resp.Header)
	for _, key := range keys {
		if l.keys.wanted(key) == nil {
			l.keys.unwrite(key)
			l.settle(key)
		}
	}
	l.publish()
	return nil
}

// commit runs one transaction of ops within the loop's request timeout.
func (l *loop) commit(ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.opTimeout())
	defer cancel()
	return l.cli.Txn(ctx).Then(ops...).Commit()
}

// retireBatch writes the instances of b that were written serving (etcd
// confirmed the write) Draining, each only while its key is still bound
// to lease, in one transaction before the one that deletes them: a Discovery then sees
// each deleted while Draining, a deliberate departure (Snapshot.Retired),
// which clients release at once, where they hold an instance deleted while
// serving for a grace (etcd revokes live leases after a paused leader
// resumes). Its failure only costs that: the deletion goes on unless
// etcd is unreachable or the lease lost.
func (l *loop) retireBatch(lease clientv3.LeaseID, b []removal) error {
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
	resp, err := l.commit(ops)
	if err != nil {
		return fmt.Errorf("etcd: drain %d keys before deleting them: %w", len(ops), err)
	}
	l.wrote(resp.Header)
	return nil
}

func (l *loop) removedEntries() []removal { return l.keys.removals() }

// putPending writes every entry not yet written under lease, many per
// transaction, each with its copies in other layouts (WithMirror) in the
// same transaction. An entry etcd refuses for good (permission denied,
// value too large) is dropped, and its Register learns why.
func (l *loop) putPending(lease clientv3.LeaseID) error {
	rebind := l.orphan != 0 // re-registering after a lost lease
	return writeInBatches(l, l.pendingEntries(), batchWrite[*entry]{
		cost: func(e *entry) txnCost {
			c := txnCost{ops: 1 + len(e.mirrors), bytes: e.size()}
			if rebind {
				c.ops++ // the read of its override
			}
			return c
		},
		commit:  func(b []*entry) error { return l.putBatch(lease, b, rebind) },
		refused: l.drop,
	})
}

// putBatch writes the entries of b that are still current in one
// transaction. With rebind (re-registering after a lost lease) the same
// transaction reads each entry's override, and overrides still bound to
// another lease are moved onto lease.
func (l *loop) putBatch(lease clientv3.LeaseID, b []*entry, rebind bool) error {
	cur := make([]*entry, 0, len(b))
	for _, e := range b {
		if l.keys.wanted(e.key) == e {
			cur = append(cur, e) // else dropped since the list was taken
		}
	}
	if len(cur) == 0 {
		return nil
	}
	ops := make([]clientv3.Op, 0, len(cur)*2)
	keys := make([]string, 0, len(cur))
	for _, e := range cur {
		ops = append(ops, e.putOps(lease)...)
		if rebind {
			ops = append(ops, clientv3.OpGet(overrideKey(e.key)))
		}
		keys = append(keys, e.key)
	}
	resp, err := l.commit(ops)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		l.leaseLost()
		return fmt.Errorf("etcd: put %s: %w: %w", describeKeys(keys), errLeaseLost, err)
	case err != nil:
		if unreachable(err) {
			// Unanswered, it may still have been applied: an entry
			// removed before it is written again then gets a deletion
			// (keyset.unanswered).
			l.keys.unanswered(cur)
		}
		return fmt.Errorf("etcd: put %s: %w", describeKeys(keys), err)
	}
	l.wrote(resp.Header)
	if rebind {
		if err := l.rebindOverrides(lease, resp.Responses); err != nil {
			return err
		}
	}
	for _, e := range cur {
		l.keys.wrote(e, resp.Header.Revision)
		l.settle(e.key)
	}
	l.publish()
	return nil
}

// drop removes e, which etcd refused for good (err), from the desired set;
// its Register returns the error.
func (l *loop) drop(e *entry, err error) error {
	if tooLarge(err) {
		err = fmt.Errorf("%w: the instance's keys and values (with its copies, WithMirror) are %d bytes, more than etcd takes in a request (its --max-request-bytes)", err, e.size())
	}
	l.log.Error("etcd refused the registration; dropping it", "key", e.key, "error", err)
	if l.keys.wanted(e.key) == e {
		e.err = err
		l.keys.unwant(e.key)
		l.settle(e.key)
	}
	l.publish()
	return nil
}

// rebindOverrides moves the operators' overrides read in a transaction's
// responses that are bound to another lease onto lease, the new lease
// their keys were just written under, so that they survive the
// re-registration (the lost lease is revoked next). A value is kept as it
// is; an override changed meanwhile is left alone.
func (l *loop) rebindOverrides(lease clientv3.LeaseID, responses []*pb.ResponseOp) error {
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
	return writeInBatches(l, moves, batchWrite[*mvccpb.KeyValue]{
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
			ctx, cancel := context.WithTimeout(l.ctx, l.opTimeout())
			defer cancel()
			if _, err := l.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				return fmt.Errorf("etcd: keep override %s: %w", describeKeys(keys), err)
			}
			return nil
		},
		refused: func(_ *mvccpb.KeyValue, err error) error { return err },
	})
}

// overrideKey returns the key of the operator's override of key.
func overrideKey(key string) string { return key + "/" + registry.OverrideSuffix }

func (l *loop) pendingEntries() []*entry { return l.keys.toWriteEntries() }

// permanent reports whether etcd refused a write for what it holds, a
// reason retrying the same request cannot fix: a transaction of several
// instances is split (writeInBatches), a single one dropped.
func permanent(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) ||
		tooLarge(err) ||
		errors.Is(err, rpctypes.ErrKeyNotFound) ||
		errors.Is(err, rpctypes.ErrTooManyOps) ||
		errors.Is(err, rpctypes.ErrDuplicateKey)
}

// tooLarge reports whether a request was refused for its size: by etcd
// (over its --max-request-bytes) or, before etcd saw it, by gRPC (over
// that limit and gRPC's margin of 512 KiB, or the client's own limit:
// codes.ResourceExhausted saying "larger than max"). etcd's "too many
// requests" is ResourceExhausted too, and is not a size.
func tooLarge(err error) bool {
	return errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "larger than max")
}

// opTimeout bounds each etcd request of the run loop: the request timeout
// less a tenth (at most 250ms), so that a failed attempt is recorded, and
// its cause reaches the ErrPending of a Register waiting for the same
// request timeout, before that Register gives up.
func (l *loop) opTimeout() time.Duration {
	return l.opts.requestTimeout - min(l.opts.requestTimeout/10, 250*time.Millisecond)
}
