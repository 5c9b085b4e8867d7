package etcd

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/watchhub"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd/internal/watchloop"
)

// service follows one service: one goroutine, one etcd watch (a
// watchloop.Loop, for which it is the Handler), one cache.
type service struct {
	d      *Discovery
	name   string
	prefix string
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	// hub holds the snapshot and the watchers; only the loop publishes.
	hub *watchhub.Hub

	// loop gets the service and watches it; it calls the methods below
	// from its goroutine, which owns what follows.
	loop  *watchloop.Loop
	cache *cache     // the instances by key, and the list last published
	bad   []badValue // values skipped since the last publish, to log
	gen   uint64     // the generation of the history read (Loop.Generation)
}

// newLoop returns the Loop that follows s.
func (s *service) newLoop() *watchloop.Loop {
	o := s.d.opts
	return watchloop.New(watchloop.Config{
		Client: s.d.cli, Key: s.prefix,
		GetOptions: []clientv3.OpOption{clientv3.WithPrefix()}, WatchOptions: []clientv3.OpOption{clientv3.WithPrefix()},
		Every: o.progressEvery, RequestTimeout: o.requestTimeout, BackoffMin: o.backoffMin, BackoffMax: o.backoffMax,
		Streams: &s.d.watchStream, Counters: &s.d.counters,
	}, s)
}

// stop ends the run goroutine and waits for it.
func (s *service) stop() {
	s.cancel()
	<-s.done
}

// run loads the service, follows it, and after any failure loads it again,
// with backoff, until ctx ends.
//
// The watch starts at the revision of the load, not the next one: etcd
// answers a progress request only when every watcher on the stream starts
// at or below the store's revision, so a watch from R+1 on a quiet store
// would never confirm it is live. The events of revision R are already in
// the load; applying them again changes nothing.
func (s *service) run(ctx context.Context) {
	defer close(s.done)
	s.loop.Run(ctx)
}

// Loaded replaces the cache with the service as read and publishes it; the
// watch starts at the revision read.
func (s *service) Loaded(resp *clientv3.GetResponse) int64 {
	s.gen = s.loop.Generation()
	s.bad = append(s.bad, s.cache.load(resp.Kvs)...)
	s.Settled(resp.Header.Revision)
	return resp.Header.Revision
}

// Apply applies a watch response's events to the cache.
func (s *service) Apply(wresp clientv3.WatchResponse) {
	if len(wresp.Events) > 0 {
		s.d.watchResponses.Add(1) // progress notifications not counted
	}
	for _, ev := range wresp.Events {
		s.bad = s.cache.apply(ev, s.bad)
	}
}

// Settled logs the bad values seen and publishes the cache at rev.
func (s *service) Settled(rev int64) {
	s.skipped(s.bad)
	s.bad = nil
	s.publish(rev)
}

// Rewound resets what depends on the old history after a rewind: the
// record of bad values logged once per mod revision (mod revisions of the
// new history may repeat those of the old one). The caches are replaced by
// the next load, published under the new generation.
func (s *service) Rewound(rw watchloop.Rewind, where string) {
	s.skipped(s.bad)
	s.bad = nil
	s.gen = rw.Generation
	s.cache.forgetBad()
	s.log.Warn("etcd history changed (restored from a backup, restarted empty or another cluster); reloading",
		"seen_in", where,
		"old_revision", rw.OldRev, "new_revision", rw.NewRev,
		"old_cluster_id", fmt.Sprintf("%x", rw.OldCluster), "new_cluster_id", fmt.Sprintf("%x", rw.NewCluster),
		"generation", rw.Generation)
}

// Stale marks the snapshot stale.
func (s *service) Stale(err error) { s.markStale(err) }

// Retrying marks the snapshot stale and says why.
func (s *service) Retrying(err error, wait time.Duration) {
	s.markStale(err)
	s.log.Warn("watch interrupted; reloading", "error", err,
		"stale_for", seconds(s.staleFor()), "next_attempt_in", wait.Round(time.Millisecond))
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
		notify = notify || snap.Generation != s.gen
		snap.Revision = rev
		snap.Generation = s.gen
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
