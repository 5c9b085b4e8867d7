package etcd

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/backoff"
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
func (r *Registrar) wrote(h *pb.ResponseHeader) {
	if h == nil {
		return
	}
	if h.ClusterId != r.clusterID {
		r.clusterID, r.lastWrite = h.ClusterId, h.Revision
		return
	}
	r.lastWrite = max(r.lastWrite, h.Revision)
}

// audit checks that etcd holds every key written under the current lease
// and marks the missing ones for writing; after a rewind of etcd's history
// it marks every key. Called by the run loop only.
func (r *Registrar) audit() error {
	r.mu.Lock()
	lease := r.leaseIDLocked()
	r.mu.Unlock()
	if lease == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.opTimeout())
	defer cancel()
	resp, err := r.cli.TimeToLive(ctx, lease, clientv3.WithAttachedKeys())
	if err != nil {
		return fmt.Errorf("etcd: audit lease %x: %w", int64(lease), err)
	}
	if resp.TTL <= 0 {
		// The keepalive notices too; the key audit has nothing to check.
		r.log.Warn("audit found the lease gone; re-registering under a new lease", "lease", fmt.Sprintf("%x", int64(lease)))
		r.down.fail(time.Now())
		r.leaseLost()
		r.kick()
		return nil
	}
	r.mu.Lock()
	var own string // a key the registrar wrote: one its etcd role may read
	for key := range r.keys.current() {
		own = key
		break
	}
	r.mu.Unlock()
	rewound, why, err := r.rewound(ctx, resp.ResponseHeader, own)
	if err != nil {
		return err
	}
	attached := make(map[string]struct{}, len(resp.Keys))
	for _, k := range resp.Keys {
		attached[string(k)] = struct{}{}
	}
	r.mu.Lock()
	var repaired []string
	for key, e := range r.keys.current() {
		if _, ok := attached[key]; ok && !rewound && e.mirrorsAttached(attached) {
			continue
		}
		r.keys.unwrite(key)
		repaired = append(repaired, key)
	}
	if len(repaired) > 0 {
		r.status.Repairs += uint64(len(repaired))
		r.updateStatusLocked()
	}
	r.mu.Unlock()
	if rewound {
		r.clusterID, r.lastWrite = resp.ClusterId, resp.Revision
	}
	if len(repaired) > 0 {
		sort.Strings(repaired)
		if rewound {
			r.log.Warn("etcd's history went back below this registrar's writes; writing every key again",
				"why", why, "keys", len(repaired))
		} else {
			r.log.Warn("registered keys missing from etcd; writing them again", "keys", repaired)
		}
		r.kick()
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
func (r *Registrar) rewound(ctx context.Context, h *pb.ResponseHeader, own string) (bool, string, error) {
	if h == nil || r.lastWrite == 0 || own == "" {
		return false, "", nil
	}
	if h.ClusterId != r.clusterID {
		return true, fmt.Sprintf("cluster ID %x, was %x", h.ClusterId, r.clusterID), nil
	}
	if h.Revision >= r.lastWrite {
		return false, "", nil
	}
	resp, err := r.cli.Get(ctx, own, clientv3.WithCountOnly())
	if err != nil {
		return false, "", fmt.Errorf("etcd: audit revision: %w", err)
	}
	if resp.Header.ClusterId != r.clusterID || resp.Header.Revision < r.lastWrite {
		return true, fmt.Sprintf("revision %d, below the last write at %d", resp.Header.Revision, r.lastWrite), nil
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
func (r *Registrar) keysDeleted(dels []deletion) {
	r.mu.Lock()
	var repaired []deletion
	for _, d := range dels {
		if r.ls == nil || !r.keys.repairable(d.key, d.rev) {
			continue
		}
		r.keys.unwrite(d.key)
		repaired = append(repaired, d)
	}
	if len(repaired) > 0 {
		r.status.Repairs += uint64(len(repaired))
		r.updateStatusLocked()
	}
	r.mu.Unlock()
	switch len(repaired) {
	case 0:
		return
	case 1:
		r.log.Warn("registered key deleted from etcd; writing it again (drain an instance to take it out of traffic)",
			"key", repaired[0].key, "revision", repaired[0].rev)
	default:
		r.log.Warn("registered keys deleted from etcd; writing them again (drain an instance to take it out of traffic)",
			"keys", len(repaired), "first", repaired[0].key, "revision", repaired[0].rev)
	}
	r.kick()
}

// writtenServices returns the key prefixes, with their trailing slash, of
// the services in which the registrar has keys written under a live lease:
// the ones to watch for deletions.
func (r *Registrar) writtenServices() map[string]struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]struct{})
	if r.ls == nil {
		return out
	}
	for key := range r.keys.writtenKeys() {
		if i := strings.LastIndexByte(key, '/'); i >= 0 {
			out[key[:i+1]] = struct{}{}
		}
	}
	return out
}

// ownKeys watches the deletions in each service prefix the registrar has
// instances in, one watch per service, sharing the client's watch stream.
type ownKeys struct {
	r       *Registrar
	watches map[string]context.CancelFunc
	wg      sync.WaitGroup
	// restarted is signalled when a watch works again after one ended:
	// deletions in between were not seen, so an audit is due.
	restarted chan struct{}
}

func newOwnKeys(r *Registrar) *ownKeys {
	return &ownKeys{r: r, watches: make(map[string]context.CancelFunc), restarted: make(chan struct{}, 1)}
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
		ctx, cancel := context.WithCancel(o.r.ctx)
		o.watches[p] = cancel
		o.wg.Add(1)
		// From just after the last write: every key of the service was
		// written by then, so no deletion of one is missed while the
		// watch is being set up.
		go o.watch(ctx, p, o.r.lastWrite+1)
	}
}

func (o *ownKeys) stop() {
	for p, cancel := range o.watches {
		cancel()
		delete(o.watches, p)
	}
	o.wg.Wait()
}

// watch follows the deletions under prefix from revision from until ctx
// ends, opening the watch again (with backoff, from just after the last
// event seen) whenever it ends.
func (o *ownKeys) watch(ctx context.Context, prefix string, from int64) {
	defer o.wg.Done()
	r := o.r
	bo := backoff.New(r.opts.backoffMin, r.opts.backoffMax)
	// lost is set when a watch that worked ended: deletions until the next
	// one works were not seen, so an audit is due once it does.
	lost := false
	backoff.Retry(ctx, bo, func(ctx context.Context) error {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()}
		if from > 0 {
			opts = append(opts, clientv3.WithRev(from))
		}
		for resp := range r.cli.Watch(wctx, prefix, opts...) {
			if resp.CompactRevision != 0 {
				from = 0 // compacted: from now on; the audit covers the gap
			}
			if err := resp.Err(); err != nil {
				return err
			}
			if lost {
				lost = false
				select {
				case o.restarted <- struct{}{}:
				default:
				}
			}
			bo.Reset()
			var dels []deletion
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					dels = append(dels, deletion{key: string(ev.Kv.Key), rev: ev.Kv.ModRevision})
				}
				from = ev.Kv.ModRevision + 1
			}
			r.keysDeleted(dels)
		}
		return nil
	}, func(error, time.Duration) { lost = true })
}
