package etcd

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry/etcd/internal/watchloop"
)

// The registrar owns its keys: while it lives, every key it wrote exists
// with its value, whatever happens in etcd. Two mechanisms find a key that
// is gone:
//
//   - a watch of the deletions in each service it registers in (ownKeys):
//     a key deleted by hand is written again as soon as the event arrives;
//   - an audit every audit interval (audit): one LeaseTimeToLive request
//     lists the keys attached to the lease, and its header tells whether
//     etcd's history went back below the registrar's last write (a restore
//     from a backup keeps the lease but may lose keys or bring back older
//     values). A missing key is written again; after a rewind, every key.

// wrote records the header of a write's answer: the revision the
// registrar's keys are known to be at, and the cluster that holds them.
// Called by the run loop only.
func (l *loop) wrote(h *pb.ResponseHeader) {
	if h == nil {
		return
	}
	if h.ClusterId != l.clusterID {
		l.clusterID, l.lastWrite = h.ClusterId, h.Revision
		l.markWritten()
		return
	}
	l.lastWrite = max(l.lastWrite, h.Revision)
	l.markWritten()
}

// markWritten shows the watches of the registrar's keys where it last
// wrote.
func (l *loop) markWritten() {
	if l.own != nil {
		l.own.written.Store(&writeMark{cluster: l.clusterID, rev: l.lastWrite})
	}
}

// audit checks that etcd holds every key written under the current lease
// and marks the missing ones for writing; after a rewind of etcd's history
// it marks every key. Called by the run loop only.
func (l *loop) audit() error {
	lease := l.leaseID()
	if lease == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.opTimeout())
	defer cancel()
	resp, err := l.cli.TimeToLive(ctx, lease, clientv3.WithAttachedKeys())
	if err != nil {
		return fmt.Errorf("etcd: audit lease %x: %w", int64(lease), err)
	}
	if resp.TTL <= 0 {
		// The keepalive notices too; the key audit has nothing to check.
		l.log.Warn("audit found the lease gone; re-registering under a new lease", "lease", fmt.Sprintf("%x", int64(lease)))
		l.down.fail(time.Now())
		l.leaseLost()
		return nil
	}
	var own string // a key the registrar wrote: one its etcd role may read
	for key := range l.keys.current() {
		own = key
		break
	}
	rewound, why, err := l.rewound(ctx, resp.ResponseHeader, own)
	if err != nil {
		return err
	}
	attached := make(map[string]struct{}, len(resp.Keys))
	for _, k := range resp.Keys {
		attached[string(k)] = struct{}{}
	}
	var repaired []string
	for key, e := range l.keys.current() {
		if _, ok := attached[key]; ok && !rewound && e.mirrorsAttached(attached) {
			continue
		}
		l.keys.unwrite(key)
		repaired = append(repaired, key)
	}
	if len(repaired) > 0 {
		l.status.Repairs += uint64(len(repaired))
		l.publish()
	}
	if rewound {
		l.clusterID, l.lastWrite = resp.ClusterId, resp.Revision
		l.markWritten()
	}
	if len(repaired) > 0 {
		sort.Strings(repaired)
		if rewound {
			l.log.Warn("etcd's history went back below this registrar's writes; writing every key again",
				"why", why, "keys", len(repaired))
		} else {
			l.log.Warn("registered keys missing from etcd; writing them again", "keys", repaired)
		}
	}
	return nil
}

// rewound reports whether h, the header of an answer, shows a history other
// than the one the registrar wrote in: another cluster ID, or a revision
// below its last write. A lower revision from a member that is merely
// behind is told apart with a linearizable read, which no member answers
// below the last write unless the history was replaced. That read is of
// own, a key the registrar wrote: a role restricted to the service's
// prefix may read it, and no other.
func (l *loop) rewound(ctx context.Context, h *pb.ResponseHeader, own string) (bool, string, error) {
	if h == nil || l.lastWrite == 0 || own == "" {
		return false, "", nil
	}
	if h.ClusterId != l.clusterID {
		return true, fmt.Sprintf("cluster ID %x, was %x", h.ClusterId, l.clusterID), nil
	}
	if h.Revision >= l.lastWrite {
		return false, "", nil
	}
	resp, err := l.cli.Get(ctx, own, clientv3.WithCountOnly())
	if err != nil {
		return false, "", fmt.Errorf("etcd: audit revision: %w", err)
	}
	if resp.Header.ClusterId != l.clusterID || resp.Header.Revision < l.lastWrite {
		return true, fmt.Sprintf("revision %d, below the last write at %d", resp.Header.Revision, l.lastWrite), nil
	}
	return false, "", nil
}

// deletion is the deletion of a key seen by a watch, at revision rev.
type deletion struct {
	key string
	rev int64
}

// keysDeleted handles the deletions seen in one watch response: each key
// the registrar wrote and still wants as written is written again. A lease
// revoked by hand deletes every key at once: one log line says so, not one
// per key.
func (l *loop) keysDeleted(dels []deletion) {
	var repaired []deletion
	for _, d := range dels {
		if l.ls == nil || !l.keys.repairable(d.key, d.rev) {
			continue
		}
		l.keys.unwrite(d.key)
		repaired = append(repaired, d)
	}
	if len(repaired) > 0 {
		l.status.Repairs += uint64(len(repaired))
		l.publish()
	}
	switch len(repaired) {
	case 0:
		return
	case 1:
		l.log.Warn("registered key deleted from etcd; writing it again (drain an instance to take it out of traffic)",
			"key", repaired[0].key, "revision", repaired[0].rev)
	default:
		l.log.Warn("registered keys deleted from etcd; writing them again (drain an instance to take it out of traffic)",
			"keys", len(repaired), "first", repaired[0].key, "revision", repaired[0].rev)
	}
}

// writtenServices returns the key prefixes, with their trailing slash, of
// the services in which the registrar has keys written under a live lease:
// the ones to watch for deletions.
func (l *loop) writtenServices() map[string]struct{} {
	out := make(map[string]struct{})
	if l.ls == nil {
		return out
	}
	for key := range l.keys.writtenKeys() {
		if i := strings.LastIndexByte(key, '/'); i >= 0 {
			out[key[:i+1]] = struct{}{}
		}
	}
	return out
}

// ownKeys watches the deletions in each service prefix the registrar has
// instances in, one watch per service (a watchloop.Loop: progress requests,
// silence detection, a new stream off a silent member, compaction and
// rewinds handled), on gRPC streams of their own. Its watches hand what
// they see to the run loop through its inbox: the deletions, and a watch
// opened again after one ended (deletions in between were not seen, so an
// audit is due). The run loop calls its methods.
type ownKeys struct {
	l       *loop
	watches map[string]context.CancelFunc
	streams atomic.Uint64 // the gRPC stream of the watches
	// written is where the registrar last wrote, for the watches to
	// compare their headers with; nil before the first write.
	written atomic.Pointer[writeMark]
	wg      sync.WaitGroup
}

// writeMark is the cluster and the revision of the registrar's last write.
type writeMark struct {
	cluster uint64
	rev     int64
}

func newOwnKeys(l *loop) *ownKeys {
	return &ownKeys{l: l, watches: make(map[string]context.CancelFunc)}
}

// follow starts a watch for each prefix not watched yet and stops the
// watches of prefixes no longer in want.
func (o *ownKeys) follow(want map[string]struct{}) {
	for p, cancel := range o.watches {
		if _, ok := want[p]; !ok {
			cancel()
			delete(o.watches, p)
		}
	}
	for p := range want {
		if _, ok := o.watches[p]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(o.l.ctx)
		o.watches[p] = cancel
		o.wg.Add(1)
		// From just after the last write: every key of the service was
		// written by then, so no deletion of one is missed while the
		// watch is being set up.
		w := &ownWatch{inbox: o.l.r.inbox, written: &o.written, from: o.l.lastWrite + 1}
		opts := o.l.opts
		loop := watchloop.New(watchloop.Config{
			Client: o.l.cli, Key: p,
			GetOptions:   []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()},
			WatchOptions: []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut()},
			Every:        opts.progressEvery, RequestTimeout: opts.requestTimeout,
			BackoffMin: opts.backoffMin, BackoffMax: opts.backoffMax,
			Streams: &o.streams, StreamTag: "own-",
		}, w)
		go func() {
			defer o.wg.Done()
			loop.Run(ctx)
		}()
	}
}

func (o *ownKeys) stop() {
	for p, cancel := range o.watches {
		cancel()
		delete(o.watches, p)
	}
	o.wg.Wait()
}

// ownWatch is the watchloop.Handler of the deletions under one prefix: it
// hands them to the run loop, and asks for an audit when a watch is opened
// again after one ended, or when a header shows etcd below the registrar's
// last write. The latter is a restore the watch loop cannot see as a
// rewind: the history went back to a revision below the registrar's writes
// but not below any header the watch had seen (the writes were puts, which
// the watch filters out). A member merely behind shows it too, for a
// moment; the audit tells the two apart with a linearizable read, and is
// asked for once per last write.
type ownWatch struct {
	inbox   *inbox
	written *atomic.Pointer[writeMark]
	flagged *writeMark // the last write an audit was asked for
	// from is the revision the first watch starts from: just after the
	// last write, so that no deletion is missed while it is set up.
	from int64
	// lost is set when a watch ended: deletions until the next one is
	// opened were not seen, so an audit is due once it is.
	lost bool
}

// Loaded returns the revision to watch from: the first time from, or the
// Get's revision if it is lower (a progress request needs a watch at or
// below the store's revision); after a watch ended, the Get's revision,
// with an audit for what happened in between (a compaction, a rewind, an
// outage).
func (w *ownWatch) Loaded(resp *clientv3.GetResponse) int64 {
	rev := resp.Header.Revision
	if w.lost {
		w.lost = false
		w.inbox.put(message{reopened: true})
		return rev
	}
	w.checkBelow(resp.Header)
	return min(w.from, rev)
}

// Apply hands the deletions of a watch response to the run loop.
func (w *ownWatch) Apply(resp clientv3.WatchResponse) {
	var dels []deletion
	for _, ev := range resp.Events {
		if ev.Type == mvccpb.DELETE {
			dels = append(dels, deletion{key: string(ev.Kv.Key), rev: ev.Kv.ModRevision})
		}
	}
	if len(dels) > 0 {
		w.inbox.put(message{deleted: dels})
	}
	w.checkBelow(resp.Header)
}

// checkBelow asks for an audit if h shows etcd below the registrar's last
// write (another cluster, or a lower revision), once per last write.
func (w *ownWatch) checkBelow(h *pb.ResponseHeader) {
	m := w.written.Load()
	if m == nil || m == w.flagged || h == nil || (h.ClusterId == m.cluster && h.Revision >= m.rev) {
		return
	}
	w.flagged = m
	w.inbox.put(message{reopened: true})
}

// Settled has nothing to do: each response was handed on as it came.
func (w *ownWatch) Settled(int64) {}

// Rewound has nothing to do: the audit that follows the new watch writes
// what the rewind lost.
func (w *ownWatch) Rewound(watchloop.Rewind, string) {}

// Stale has nothing to do: the audit covers what the watch misses.
func (w *ownWatch) Stale(error) {}

// Retrying records that deletions may go unseen until the next watch.
func (w *ownWatch) Retrying(error, time.Duration) { w.lost = true }
