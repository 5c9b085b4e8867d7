package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/backoff"
	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
)

// service follows one service: one goroutine, one etcd watch, one cache.
type service struct {
	d      *Discovery
	name   string
	prefix string
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	// hub holds the snapshot and the watchers; only run publishes.
	hub *watchhub.Hub

	// Owned by the run goroutine.
	cache *cache  // the instances by key, and the list last published
	hist  history // the etcd history of the responses, for rewinds

	// watchMember is the member ID in the last header of the watch; read
	// by Stats.
	watchMember atomic.Uint64

	// rec is the recovery after a silent watch, owned by the run
	// goroutine too (discovery_recovery.go).
	rec recovery
}

// stop ends the run goroutine and waits for it.
func (s *service) stop() {
	s.cancel()
	<-s.done
}

// run loads the service, follows it, and after any failure loads it again,
// with backoff, until ctx ends.
func (s *service) run(ctx context.Context) {
	defer close(s.done)
	bo := backoff.New(s.d.opts.backoffMin, s.d.opts.backoffMax)
	first := true
	backoff.Retry(ctx, bo, func(ctx context.Context) error {
		if !first {
			s.d.resyncs.Add(1)
		}
		first = false
		rev, err := s.load(ctx)
		if err != nil {
			s.rec.failed()
			return err
		}
		healthy, err := s.follow(ctx, rev)
		if healthy {
			bo.Reset()
		}
		return err
	}, func(err error, wait time.Duration) {
		s.markStale(err)
		s.log.Warn("watch interrupted; reloading", "error", err,
			"stale_for", seconds(s.staleFor()), "next_attempt_in", wait.Round(time.Millisecond))
	})
}

// load reads the whole service with one linearizable Get, replaces the
// cache and publishes the result. It returns the revision read.
func (s *service) load(ctx context.Context) (int64, error) {
	slow := s.staleIfSlow("get")
	resp, err := s.get(ctx)
	slow.Stop()
	if err != nil {
		return 0, fmt.Errorf("etcd: get %s: %w", s.prefix, err)
	}
	s.d.loads.Add(1)
	// Before decoding: a rewind forgets which bad values were logged.
	if rw, ok := s.hist.observe(resp.Header.ClusterId, resp.Header.Revision, true); ok {
		s.rewound(rw, "get")
	}
	s.hist.loaded()
	s.skipped(s.cache.load(resp.Kvs))
	s.publish(resp.Header.Revision)
	return resp.Header.Revision, nil
}

// errRewound ends a watch whose responses belong to another history.
var errRewound = errors.New("etcd: the store's history changed (revision went backwards or another cluster)")

// follow watches the service from rev, the revision of the load, and
// applies each response to the cache. It returns when the watch ends,
// reporting whether it got at least one response (so the backoff can start
// over).
//
// The watch starts at rev, not rev+1: etcd answers a progress request only
// when every watcher on the stream starts at or below the store's revision,
// so a watch from rev+1 on a quiet store would never confirm it is live.
// The events of revision rev are already in the load; applying them again
// changes nothing.
func (s *service) follow(ctx context.Context, rev int64) (healthy bool, err error) {
	// The etcd client runs every watch with the same metadata on one gRPC
	// stream, bound to one member. After etcd refuses a watch for the
	// stream's auth token (etcd-io/etcd#12385: a stream keeps the token it
	// was opened with), after a silence, or when a new watch is not
	// confirmed in time, the next attempt uses a new stream, which the
	// client's balancer places on another member; the old one may be
	// stalled on a frozen member whose connection still looks up.
	defer s.watchMember.Store(0)
	a, err := s.openWatch(ctx, rev)
	if err != nil {
		return false, err
	}
	defer a.cancel()
	pending := []clientv3.WatchResponse{a.first}

	q := newQuietness(s.d.opts.progressEvery, s.d.opts.silenceLimit(), time.Now())
	defer q.timer.Stop()
	for {
		var wresp clientv3.WatchResponse
		if len(pending) > 0 {
			wresp, pending = pending[0], nil
		} else {
			var ok bool
			select {
			case <-ctx.Done():
				return healthy, ctx.Err()
			case wresp, ok = <-a.wch:
				if !ok {
					return healthy, errors.New("etcd: watch channel closed")
				}
			case now := <-q.timer.C:
				if err := s.quietTimer(a, q, now); err != nil {
					return healthy, err
				}
				continue
			}
		}
		if wresp.CompactRevision != 0 {
			// The watch fell behind the store's compaction (it was
			// resumed by the client after a lost connection, say):
			// events between rev and the compaction are gone, so only a
			// reload can tell what changed.
			s.d.compactionReloads.Add(1)
			return healthy, fmt.Errorf("etcd: watch %s from revision %d: compacted at %d: %w",
				s.prefix, rev, wresp.CompactRevision, rpctypes.ErrCompacted)
		}
		if err := wresp.Err(); err != nil {
			if tokenRefused(err) {
				s.moveOn(a.stream)
			}
			return healthy, fmt.Errorf("etcd: watch %s: %w", s.prefix, err)
		}
		if wresp.Canceled {
			return healthy, fmt.Errorf("etcd: watch %s canceled: %s", s.prefix, wresp.CancelReason)
		}
		if rw, ok := s.hist.observe(wresp.Header.ClusterId, wresp.Header.Revision, !wresp.Created); ok {
			s.rewound(rw, "watch")
			return healthy, errRewound
		}
		q.heard(time.Now())
		s.watchMember.Store(wresp.Header.MemberId)
		if wresp.Created {
			// Confirmed, on a member that answers.
			s.rec.confirmed()
			continue
		}
		healthy = true
		bad := s.applyEvents(wresp, nil)
		rev = max(rev, wresp.Header.Revision)
		var next *clientv3.WatchResponse
		rev, bad, next, err = s.drain(a.wch, rev, bad)
		if err != nil {
			return healthy, err
		}
		if next != nil {
			pending = []clientv3.WatchResponse{*next} // handled above, next
		}
		q.heard(time.Now())
		s.skipped(bad)
		s.publish(rev)
	}
}

// quietness tracks when a followed watch was last heard from, when it is
// to be asked for progress next, and the timer that wakes its loop for
// either.
type quietness struct {
	every     time.Duration // the progress interval
	limit     time.Duration // silent for this long, the watch is given up
	lastHeard time.Time
	nextProbe time.Time
	timer     *time.Timer
}

// newQuietness starts tracking a watch heard from at now. The caller stops
// the timer.
func newQuietness(every, limit time.Duration, now time.Time) *quietness {
	q := &quietness{every: every, limit: limit, timer: time.NewTimer(every)}
	q.heard(now)
	return q
}

// heard records a response at now: the next probe is a progress interval
// away.
func (q *quietness) heard(now time.Time) {
	q.lastHeard = now
	q.nextProbe = now.Add(q.every)
}

// quietTimer handles the quiet timer of the followed watch a firing at now.
// Silent for the silence limit (two progress requests unanswered), the
// watch is given up, the service to be reloaded, with an error; otherwise
// progress is requested when due and the timer set again.
func (s *service) quietTimer(a *watchAttempt, q *quietness, now time.Time) error {
	quiet := now.Sub(q.lastHeard)
	if quiet >= q.limit {
		// Not even a progress notification: the connection is gone or
		// stalled (a frozen member keeps its TCP connections up).
		// Reloading (the Get waits for etcd to answer) and watching
		// again on another stream is the only way to be sure nothing
		// was missed; a watch the client resumes by itself after an
		// outage may start past the store's revision and so never
		// answer a progress request on a quiet store.
		s.moveOn(a.stream)
		s.d.silenceReloads.Add(1)
		s.rec.silenced(s.watchMember.Load())
		return fmt.Errorf("etcd: no response on the watch of %s for %v", s.prefix, quiet.Round(time.Millisecond))
	}
	deadline := q.lastHeard.Add(q.limit)
	if !now.Before(q.nextProbe) {
		// Answered by a progress notification on this watch's stream, if
		// the stream is alive. The context carries the same metadata, so
		// it selects the same stream. Bounded so that the silence is
		// still noticed on time.
		pctx, pcancel := context.WithDeadline(a.ctx, minTime(now.Add(q.every), deadline))
		_ = s.d.cli.RequestProgress(pctx)
		pcancel()
		q.nextProbe = time.Now().Add(q.every)
	}
	q.timer.Reset(max(time.Until(minTime(q.nextProbe, deadline)), time.Millisecond))
	return nil
}

// drain applies the watch responses already queued on wch after one, up
// to drainLimit, so that one snapshot of them all is published: a mass
// expiry arrives as a trickle of responses (etcd revokes about 1,000 leases
// a second), and a list copied per response would let the Discovery fall
// behind. It returns the revision and the bad values so far, and the first
// queued response that is not events only, for the caller to handle next.
// A rewind ends the watch with errRewound, the bad values logged.
func (s *service) drain(wch clientv3.WatchChan, rev int64, bad []badValue) (int64, []badValue, *clientv3.WatchResponse, error) {
	for range drainLimit {
		more, ok := queued(wch)
		if !ok {
			break
		}
		if !eventsOnly(more) {
			return rev, bad, &more, nil
		}
		if rw, ok := s.hist.observe(more.Header.ClusterId, more.Header.Revision, true); ok {
			s.skipped(bad)
			s.rewound(rw, "watch")
			return rev, bad, nil, errRewound
		}
		bad = s.applyEvents(more, bad)
		rev = max(rev, more.Header.Revision)
		s.watchMember.Store(more.Header.MemberId)
	}
	return rev, bad, nil, nil
}

// drainLimit bounds the queued watch responses applied with one before a
// snapshot is published, so that a steady flood is still published
// regularly.
const drainLimit = 1024

// applyEvents applies a watch response's events to the cache, adding the
// values skipped to bad.
func (s *service) applyEvents(wresp clientv3.WatchResponse, bad []badValue) []badValue {
	if len(wresp.Events) > 0 {
		s.d.watchResponses.Add(1) // progress notifications not counted
	}
	for _, ev := range wresp.Events {
		bad = s.cache.apply(ev, bad)
	}
	return bad
}

// queued returns a watch response already waiting on wch, without
// blocking; ok is false when there is none (or wch is closed, which the
// next blocking receive reports). The etcd client hands its buffered
// responses over one at a time, so a first miss yields once to let it.
func queued(wch clientv3.WatchChan) (wresp clientv3.WatchResponse, ok bool) {
	for yielded := false; ; yielded = true {
		select {
		case wresp, ok = <-wch:
			return wresp, ok
		default:
		}
		if yielded {
			return wresp, false
		}
		runtime.Gosched()
	}
}

// eventsOnly reports whether a watch response carries nothing but events
// (or a progress notification): no error, cancellation, compaction or
// creation, which the watch loop handles one by one.
func eventsOnly(wresp clientv3.WatchResponse) bool {
	return wresp.CompactRevision == 0 && wresp.Err() == nil && !wresp.Canceled && !wresp.Created
}

// rewound resets what depends on the old history after a rewind: the
// record of bad values logged once per mod revision (mod revisions of the
// new history may repeat those of the old one). The caches are replaced by
// the next load, published under the new generation.
func (s *service) rewound(rw rewind, where string) {
	s.d.rewinds.Add(1)
	s.cache.forgetBad()
	s.log.Warn("etcd history changed (restored from a backup, restarted empty or another cluster); reloading",
		"seen_in", where,
		"old_revision", rw.oldRev, "new_revision", rw.newRev,
		"old_cluster_id", fmt.Sprintf("%x", rw.oldCluster), "new_cluster_id", fmt.Sprintf("%x", rw.newCluster),
		"generation", s.hist.gen)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// staleIfSlow marks the snapshot stale if the etcd call about to be made
// takes longer than 2.5 progress intervals, the silence after which a quiet
// watch is given up. The caller stops the returned timer when the call
// returns.
func (s *service) staleIfSlow(what string) *time.Timer {
	bound := s.d.opts.silenceLimit()
	return time.AfterFunc(bound, func() {
		s.markStale(fmt.Errorf("etcd: %s of %s has not completed within %v", what, s.prefix, bound))
	})
}

// skipped logs and counts the bad values the cache reported: each once
// per value (mod revision).
func (s *service) skipped(bad []badValue) {
	for _, b := range bad {
		s.d.skipped.Add(1)
		s.log.Error("skipping bad registry value", "key", b.key, "mod_revision", b.modRevision, "error", b.err)
	}
}

// publish stores a fresh snapshot at rev with the cache's instances.
// Watchers are woken when the instances changed, on the first load, and
// when the snapshot stops being stale.
func (s *service) publish(rev int64) {
	// Built outside the lock: only this goroutine writes the instances.
	instances, changed := s.cache.next()
	if changed {
		s.d.changes.Add(1)
	}
	var stale time.Duration
	wasStale, loaded := false, false
	s.hub.Update(func(snap *registry.Snapshot) bool {
		if snap.Stale() {
			wasStale, stale, loaded = true, time.Since(snap.StaleSince), snap.Loaded
		}
		notify := changed || !snap.Loaded || snap.Stale()
		notify = notify || snap.Generation != s.hist.gen
		snap.Revision = rev
		snap.Generation = s.hist.gen
		snap.Loaded = true
		snap.StaleSince = time.Time{}
		snap.Err = nil
		if changed {
			snap.Instances = instances
		}
		snap.Retired = s.cache.retired
		return notify
	})
	if wasStale {
		// Logged outside the hub's lock: a handler may be slow.
		s.logRecovery(stale, loaded, len(instances))
	}
}

// logRecovery logs the end of a stale stretch: once per outage, as the
// snapshot stops being stale. loaded says whether a list had been loaded
// before it.
func (s *service) logRecovery(stale time.Duration, loaded bool, instances int) {
	if !loaded {
		s.log.Info("list loaded once etcd answered; following changes", "waited", seconds(stale), "instances", instances)
		return
	}
	s.log.Info("watch resumed; list current again", "stale_for", seconds(stale), "instances", instances)
}

// staleFor is how long the snapshot has been stale, 0 if it is not.
func (s *service) staleFor() time.Duration {
	snap := s.hub.Snapshot()
	if !snap.Stale() {
		return 0
	}
	return time.Since(snap.StaleSince)
}

// markStale records that the snapshot may be behind etcd, keeping its
// instances. Watchers are woken when it becomes stale and when the reason
// changes.
func (s *service) markStale(err error) {
	s.hub.Update(func(snap *registry.Snapshot) bool {
		// A new reason (a TLS or permission error after a timeout, say)
		// wakes watchers too.
		changed := snap.Err == nil || err == nil || snap.Err.Error() != err.Error()
		snap.Err = err
		if !snap.Stale() {
			snap.StaleSince = time.Now()
			changed = true
		}
		return changed
	})
}

// watchStreamKey is the gRPC metadata key that selects the watch stream.
const watchStreamKey = "muster-watch-stream"

// tokenRefused reports whether a watch was refused for the auth token of
// its stream. The etcd client reports the cancel reason as a plain error
// carrying the gRPC status text, so it is matched by text.
func tokenRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, rpctypes.ErrInvalidAuthToken.Error()) ||
		strings.Contains(msg, rpctypes.ErrAuthOldRevision.Error())
}
