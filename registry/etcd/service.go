package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/backoff"
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

	mu       sync.Mutex
	snap     registry.Snapshot
	watchers map[*watcher]struct{}
	linger   *time.Timer

	// Owned by the run goroutine, all by instance key.
	// Instances are never modified once stored: snapshots share them, and
	// an unchanged instance keeps its pointer from one snapshot to the
	// next. An instance without an override is one copy, in raw and cache.
	raw       map[string]*registry.Instance // instances as registered
	overrides map[string]registry.Override  // operators' overrides
	cache     map[string]*registry.Instance // raw with overrides applied: what is served
	bad       map[string]int64              // key (of either kind) -> mod revision of a skipped value
	hist      history                       // the etcd history of the responses, for rewinds

	// watchMember is the member ID in the last header of the watch; read
	// by Stats.
	watchMember atomic.Uint64

	// Recovery after a silent watch, owned by the run goroutine too.
	avoid       uint64 // member that went silent; a new watch should land elsewhere
	avoided     int    // new watches rejected for landing on avoid
	recovering  bool   // since a silence or an unconfirmed watch, until a watch is confirmed
	quickFailed int    // attempts failed while recovering; each doubles the next bound
}

func (s *service) addWatcher(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.linger != nil {
		s.linger.Stop()
		s.linger = nil
	}
	s.watchers[w] = struct{}{}
	if s.snap.Loaded || s.snap.Stale() {
		w.ch <- struct{}{}
	}
}

// removeWatcher closes w and reports whether it was the last watcher.
func (s *service) removeWatcher(w *watcher) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed {
		return false
	}
	w.closed = true
	close(w.ch)
	delete(s.watchers, w)
	return len(s.watchers) == 0
}

func (s *service) closeWatchers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		w.closed = true
		close(w.ch)
		if w.stopAfter != nil {
			w.stopAfter()
		}
	}
	s.watchers = map[*watcher]struct{}{}
}

// stop ends the run goroutine and waits for it.
func (s *service) stop() {
	s.mu.Lock()
	if s.linger != nil {
		s.linger.Stop()
		s.linger = nil
	}
	s.mu.Unlock()
	s.cancel()
	<-s.done
}

// run loads the service, follows it, and after any failure loads it again,
// with backoff, until ctx ends.
func (s *service) run(ctx context.Context) {
	defer close(s.done)
	bo := backoff.New(s.d.opts.backoffMin, s.d.opts.backoffMax)
	for first := true; ; first = false {
		if !first {
			s.d.resyncs.Add(1)
		}
		start := time.Now()
		rev, err := s.load(ctx)
		if err == nil {
			var healthy bool
			healthy, err = s.follow(ctx, rev)
			if healthy {
				bo.Reset()
			}
		} else if s.recovering {
			s.quickFailed++
		}
		if ctx.Err() != nil {
			return
		}
		s.markStale(err)
		// The backoff counts from the attempt's start: a Get that
		// waited for etcd to answer has waited already.
		d := max(bo.Next()-time.Since(start), 0)
		s.log.Warn("watch interrupted; reloading", "error", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
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
	raw := make(map[string]*registry.Instance, len(resp.Kvs))
	overrides := map[string]registry.Override{}
	seen := make(map[string]bool, len(s.bad))
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		seen[key] = true
		if target, ok := registry.ParseOverrideKey(s.d.opts.prefix, key); ok {
			if o, ok := s.decodeOverride(kv); ok {
				overrides[target] = o
			}
			continue
		}
		if in, ok := s.decode(kv); ok {
			raw[key] = &in
		}
	}
	for key := range s.bad {
		if !seen[key] {
			delete(s.bad, key)
		}
	}
	cache := make(map[string]*registry.Instance, len(raw))
	for key, in := range raw {
		cache[key] = s.served(key, in, overrides[key])
		if _, ok := overrides[key]; !ok {
			raw[key] = cache[key]
		}
	}
	var touched []string
	if !sameCache(s.cache, cache) {
		touched = allKeys
	}
	s.raw, s.overrides, s.cache = raw, overrides, cache
	s.publish(resp.Header.Revision, touched)
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
	stream, wctx, wch := a.stream, a.ctx, a.wch
	moveOn := func() { s.d.watchStream.CompareAndSwap(stream, stream+1) }
	pending := []clientv3.WatchResponse{a.first}

	every := s.d.opts.progressEvery
	// Silent for this long, the watch is given up and the service
	// reloaded: two progress requests have gone unanswered.
	silentLimit := 3*every - every/2
	lastHeard := time.Now()
	nextProbe := lastHeard.Add(every)
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		var wresp clientv3.WatchResponse
		if len(pending) > 0 {
			wresp, pending = pending[0], nil
		} else {
			var ok bool
			select {
			case <-ctx.Done():
				return healthy, ctx.Err()
			case wresp, ok = <-wch:
				if !ok {
					return healthy, errors.New("etcd: watch channel closed")
				}
			case now := <-timer.C:
				quiet := now.Sub(lastHeard)
				if quiet >= silentLimit {
					// Not even a progress notification: the
					// connection is gone or stalled (a frozen member
					// keeps its TCP connections up). Reloading (the
					// Get waits for etcd to answer) and watching again
					// on another stream is the only way to be sure
					// nothing was missed; a watch the client resumes by
					// itself after an outage may start past the
					// store's revision and so never answer a progress
					// request on a quiet store.
					moveOn()
					s.d.silenceReloads.Add(1)
					s.recovering, s.quickFailed = true, 0
					s.avoid, s.avoided = s.watchMember.Load(), 0
					return healthy, fmt.Errorf("etcd: no response on the watch of %s for %v", s.prefix, quiet.Round(time.Millisecond))
				}
				deadline := lastHeard.Add(silentLimit)
				if !now.Before(nextProbe) {
					// Answered by a progress notification on this
					// watch's stream, if the stream is alive. The
					// context carries the same metadata, so it selects
					// the same stream. Bounded so that the silence is
					// still noticed on time.
					pctx, pcancel := context.WithDeadline(wctx, minTime(now.Add(every), deadline))
					_ = s.d.cli.RequestProgress(pctx)
					pcancel()
					nextProbe = time.Now().Add(every)
				}
				timer.Reset(max(time.Until(minTime(nextProbe, deadline)), time.Millisecond))
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
				moveOn()
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
		lastHeard = time.Now()
		nextProbe = lastHeard.Add(every)
		s.watchMember.Store(wresp.Header.MemberId)
		if wresp.Created {
			// Confirmed, on a member that answers.
			s.recovering, s.quickFailed, s.avoid, s.avoided = false, 0, 0, 0
			continue
		}
		healthy = true
		var touched []string
		for _, ev := range wresp.Events {
			if key, changed := s.apply(ev); changed {
				touched = append(touched, key)
			}
		}
		if wresp.Header.Revision > rev {
			rev = wresp.Header.Revision
		}
		s.publish(rev, touched)
	}
}

// landedOnAvoided reports whether a watch just created on member should be
// given up because that member's watch went silent just before. A client
// with one endpoint has no other member to try, and after two such
// landings the member is accepted: it answered, so it is not frozen.
func (s *service) landedOnAvoided(member uint64) bool {
	if s.avoid == 0 || member != s.avoid || s.avoided >= 2 || len(s.d.cli.Endpoints()) < 2 {
		return false
	}
	s.avoided++
	return true
}

// attemptTimeout bounds the next Get or watch creation. Normally the
// request timeout; while recovering from a silent or unconfirmed watch, half
// a progress interval doubling with each failed attempt up to the request
// timeout, so that an attempt the client's balancer placed on the member
// that went silent (a frozen member's connection still looks up) is given
// up quickly, and an attempt on a merely slow etcd still gets time.
func (s *service) attemptTimeout() time.Duration {
	if !s.recovering {
		return s.d.opts.requestTimeout
	}
	b := s.d.opts.progressEvery / 2
	for i := 0; i < s.quickFailed && b < s.d.opts.requestTimeout; i++ {
		b *= 2
	}
	return min(b, s.d.opts.requestTimeout)
}

// rewound resets what depends on the old history after a rewind: the
// record of bad values logged once per mod revision (mod revisions of the
// new history may repeat those of the old one). The caches are replaced by
// the next load, published under the new generation.
func (s *service) rewound(rw rewind, where string) {
	s.d.rewinds.Add(1)
	clear(s.bad)
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
	bound := 3*s.d.opts.progressEvery - s.d.opts.progressEvery/2
	return time.AfterFunc(bound, func() {
		s.markStale(fmt.Errorf("etcd: %s of %s has not completed within %v", what, s.prefix, bound))
	})
}

// apply applies one event to the cache. It returns the key of the
// instance the event concerns and whether the served instance changed.
func (s *service) apply(ev *clientv3.Event) (string, bool) {
	key := string(ev.Kv.Key)
	deleted := ev.Type == mvccpb.DELETE
	if deleted {
		delete(s.bad, key)
	}
	if target, ok := registry.ParseOverrideKey(s.d.opts.prefix, key); ok {
		delete(s.overrides, target)
		if !deleted {
			if o, ok := s.decodeOverride(ev.Kv); ok {
				s.overrides[target] = o
			}
		}
		return target, s.merge(target)
	}
	delete(s.raw, key)
	if !deleted {
		if in, ok := s.decode(ev.Kv); ok {
			delete(s.bad, key)
			s.raw[key] = &in
		}
	}
	return key, s.merge(key)
}

// merge recomputes the served instance of key from its registered value and
// its override, and reports whether it changed.
func (s *service) merge(key string) bool {
	old, had := s.cache[key]
	in, ok := s.raw[key]
	if !ok {
		delete(s.cache, key)
		return had
	}
	o, overridden := s.overrides[key]
	served := s.served(key, in, o)
	if !overridden {
		s.raw[key] = served
	}
	s.cache[key] = served
	return !had || served != old
}

// served returns the instance to serve for key, registered as in, with the
// override o (zero: none): the cached instance if it is equal, so that
// snapshots keep sharing it, else in itself, else a new one.
func (s *service) served(key string, in *registry.Instance, o registry.Override) *registry.Instance {
	old, had := s.cache[key]
	if o.Weight == nil {
		if had && (old == in || old.Equal(*in)) {
			return old
		}
		return in
	}
	v := o.Apply(*in)
	if had && old.Equal(v) {
		return old
	}
	return &v
}

// decodeOverride decodes an override value, or logs and counts it once as
// skipped.
func (s *service) decodeOverride(kv *mvccpb.KeyValue) (registry.Override, bool) {
	o, err := registry.UnmarshalOverride(kv.Value)
	if err != nil {
		s.skip(kv, err)
		return registry.Override{}, false
	}
	delete(s.bad, string(kv.Key))
	return o, true
}

// decode turns a key-value into an instance, or logs and counts it once as
// skipped.
func (s *service) decode(kv *mvccpb.KeyValue) (registry.Instance, bool) {
	key := string(kv.Key)
	in, err := registry.Unmarshal(kv.Value)
	if err == nil {
		var name, id string
		name, id, err = registry.ParseKey(s.d.opts.prefix, key)
		if err == nil && (in.Name != name || in.ID != id) {
			err = fmt.Errorf("value names %s/%s but the key is %s/%s", in.Name, in.ID, name, id)
		}
	}
	if err == nil {
		return in, true
	}
	s.skip(kv, err)
	return registry.Instance{}, false
}

// skip logs and counts a bad value, once per value (mod revision).
func (s *service) skip(kv *mvccpb.KeyValue, err error) {
	key := string(kv.Key)
	if s.bad[key] != kv.ModRevision {
		s.bad[key] = kv.ModRevision
		s.d.skipped.Add(1)
		s.log.Error("skipping bad registry value", "key", key, "mod_revision", kv.ModRevision, "error", err)
	}
}

// allKeys, passed to publish, says that any key may have changed.
var allKeys = []string{}

// publish stores a fresh snapshot at rev, after the keys in touched changed
// in the cache (allKeys: any of them). Watchers are woken when the instances
// changed, on the first load, and when the snapshot stops being stale.
func (s *service) publish(rev int64, touched []string) {
	changed := touched != nil
	var instances []*registry.Instance
	if changed {
		// Built outside the lock: only this goroutine writes snapshots.
		s.mu.Lock()
		prev := s.snap.Instances
		s.mu.Unlock()
		instances = s.nextInstances(prev, touched)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	notify := changed || !s.snap.Loaded || s.snap.Stale()
	notify = notify || s.snap.Generation != s.hist.gen
	s.snap.Revision = rev
	s.snap.Generation = s.hist.gen
	s.snap.Loaded = true
	s.snap.StaleSince = time.Time{}
	s.snap.Err = nil
	if changed {
		s.snap.Instances = instances
	}
	if notify {
		s.notifyLocked()
	}
}

// patchLimit is the most changed keys applied to the previous snapshot one
// by one; more are rebuilt from the cache with a sort.
const patchLimit = 16

// nextInstances returns the sorted instance list after the keys in touched
// changed: a patched copy of prev for a few keys (O(n) instead of
// O(n log n) per watch response), a full rebuild otherwise. prev is never
// modified: watchers may hold it.
func (s *service) nextInstances(prev []*registry.Instance, touched []string) []*registry.Instance {
	if len(touched) == 0 || len(touched) > patchLimit {
		return sortedInstances(s.cache)
	}
	next := make([]*registry.Instance, len(prev), len(prev)+len(touched))
	copy(next, prev)
	for _, key := range touched {
		id := key[len(s.prefix):]
		i, found := slices.BinarySearchFunc(next, id, func(in *registry.Instance, id string) int {
			return strings.Compare(in.ID, id)
		})
		in, present := s.cache[key]
		switch {
		case present && found:
			next[i] = in
		case present:
			next = slices.Insert(next, i, in)
		case found:
			next = slices.Delete(next, i, i+1)
		}
	}
	return next
}

// markStale records that the snapshot may be behind etcd, keeping its
// instances. Watchers are woken when it becomes stale and when the reason
// changes.
func (s *service) markStale(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.snap.Err == nil || err == nil || s.snap.Err.Error() != err.Error()
	s.snap.Err = err
	if !s.snap.Stale() {
		s.snap.StaleSince = time.Now()
		changed = true
	}
	if changed {
		// A new reason (a TLS or permission error after a timeout, say)
		// wakes watchers too.
		s.notifyLocked()
	}
}

func (s *service) notifyLocked() {
	for w := range s.watchers {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

func sortedInstances(cache map[string]*registry.Instance) []*registry.Instance {
	out := make([]*registry.Instance, 0, len(cache))
	for _, in := range cache {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b *registry.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// sameCache reports whether two caches serve the same instances. Unchanged
// instances are shared between them, so pointers are compared first.
func sameCache(a, b map[string]*registry.Instance) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || (v != w && !v.Equal(*w)) {
			return false
		}
	}
	return true
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
