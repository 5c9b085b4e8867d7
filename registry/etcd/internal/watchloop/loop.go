// Package watchloop follows one etcd key or prefix honestly: a Get, then a
// watch from the Get's revision, kept until it fails, goes silent, or
// shows another history, then a Get and a watch again, with backoff.
//
// The etcd client hides most of what ends a watch: it resumes a broken
// stream by itself, keeps a stream on a frozen member whose TCP connection
// stays up, and places new requests on members round robin. A Loop does not
// rely on it for any of these:
//
//   - progress is requested every progress interval on the watch's own gRPC
//     stream, and a watch that answers nothing (no event, no progress
//     notification) for 2.5 intervals is given up: silence detection;
//   - the next watch after a silence, a refused token or an unconfirmed
//     creation goes on a new gRPC stream, which the client's balancer
//     places on another member; while recovering, the Get and the watch
//     creation are hedged across members, bounded short, and a watch that
//     lands on the member that went silent is given up once more (recovery);
//   - a compacted start revision, an error or a cancellation ends the watch
//     for a new Get;
//   - a lower revision or another cluster ID in any header is a rewind of
//     etcd's history (a restore, an empty restart, another cluster): the
//     watch ends and the next Get starts a new generation.
//
// A Handler gives the Loop's reads their meaning (the instances of a
// service, a setting, a registrar's own keys); it is called from the
// Loop's goroutine only.
package watchloop

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/backoff"
)

// StreamKey is the gRPC metadata key that selects the watch stream: the
// etcd client runs every watch with the same metadata on one stream.
const StreamKey = "muster-watch-stream"

// Config says what a Loop follows and how.
type Config struct {
	// Client is the etcd client; it outlives the Loop.
	Client *clientv3.Client
	// Key is the key, or the prefix, followed; errors name it.
	Key string
	// GetOptions and WatchOptions are added to the Get and the watch of
	// Key (clientv3.WithPrefix, WithCountOnly, WithFilterPut).
	GetOptions, WatchOptions []clientv3.OpOption
	// Every is the progress interval; silent for 2.5 of them, a watch is
	// given up.
	Every time.Duration
	// RequestTimeout bounds a Get or a watch creation outside recovery.
	RequestTimeout time.Duration
	// BackoffMin and BackoffMax bound the wait between failed attempts.
	BackoffMin, BackoffMax time.Duration
	// Streams selects the gRPC stream of the watches; the Loops of one
	// source share it. It moves on after a silence, a refused token or
	// an unconfirmed creation.
	Streams *atomic.Uint64
	// StreamTag prefixes the stream's metadata value, so that the watches
	// of different sources on one client do not share a stream.
	StreamTag string
	// Counters, if not nil, counts what the Loop does.
	Counters *Counters
}

// SilenceLimit is how long a watch may answer nothing before it is given
// up: 2.5 progress intervals, two progress requests unanswered.
func SilenceLimit(every time.Duration) time.Duration {
	return 3*every - every/2
}

// Counters count what Loops do; several Loops may share them.
type Counters struct {
	// Loads counts the Gets answered.
	Loads atomic.Uint64
	// Resyncs counts the Gets after a watch or a Get ended.
	Resyncs atomic.Uint64
	// CompactionReloads counts the watches ended because their start
	// revision was compacted.
	CompactionReloads atomic.Uint64
	// SilenceReloads counts the watches given up for silence.
	SilenceReloads atomic.Uint64
	// Rewinds counts the changes of etcd history seen.
	Rewinds atomic.Uint64
}

// Handler gives a Loop's reads their meaning. Its methods are called from
// the Loop's goroutine only, except Stale.
type Handler interface {
	// Loaded handles the answer of a Get and returns the revision to
	// watch from: at most the Get's revision, which a progress request
	// needs (etcd answers one only when every watch of the stream starts
	// at or below the store's revision).
	Loaded(resp *clientv3.GetResponse) int64
	// Apply handles one watch response with events, or a progress
	// notification (no events).
	Apply(wresp clientv3.WatchResponse)
	// Settled follows the Apply of a response and of the ones queued
	// after it: rev is the highest revision applied.
	Settled(rev int64)
	// Rewound reports a change of etcd's history, seen in where ("get" or
	// "watch"); the watch ends, and the next Get reads the new history.
	Rewound(rw Rewind, where string)
	// Stale reports that the data may be behind etcd: a Get or a watch
	// creation takes longer than the silence limit. It may be called
	// from another goroutine.
	Stale(err error)
	// Retrying reports why a Get or a watch ended, and the wait before the
	// next Get.
	Retrying(err error, wait time.Duration)
}

// Loop follows one key or prefix. Its state is owned by the goroutine
// running Run; Member may be read by any.
type Loop struct {
	cfg Config
	h   Handler

	hist history  // the etcd history of the responses, for rewinds
	rec  recovery // the recovery after a silent or unconfirmed watch

	// member is the member ID in the last header of the watch; 0 between
	// watches.
	member atomic.Uint64
}

// New returns a Loop following cfg.Key for h. Run runs it.
func New(cfg Config, h Handler) *Loop {
	if cfg.Counters == nil {
		cfg.Counters = &Counters{}
	}
	if cfg.Streams == nil {
		cfg.Streams = &atomic.Uint64{}
	}
	return &Loop{cfg: cfg, h: h}
}

// Member is the ID of the etcd member that sent the last response on the
// watch; 0 while no watch is confirmed.
func (l *Loop) Member() uint64 { return l.member.Load() }

// Generation is 1 after the first Get, one more after each rewind. Called
// from the Handler's methods.
func (l *Loop) Generation() uint64 { return l.hist.gen }

// Run loads, follows, and after any failure loads again, with backoff,
// until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	bo := backoff.New(l.cfg.BackoffMin, l.cfg.BackoffMax)
	first := true
	backoff.Retry(ctx, bo, func(ctx context.Context) error {
		if !first {
			l.cfg.Counters.Resyncs.Add(1)
		}
		first = false
		rev, err := l.load(ctx)
		if err != nil {
			l.rec.failed()
			return err
		}
		healthy, err := l.follow(ctx, rev)
		if healthy {
			bo.Reset()
		}
		return err
	}, l.h.Retrying)
}

// load reads Key with one linearizable Get, hands it to the Handler and
// returns the revision to watch from.
func (l *Loop) load(ctx context.Context) (int64, error) {
	slow := l.staleIfSlow("get")
	resp, err := l.get(ctx)
	slow.Stop()
	if err != nil {
		return 0, fmt.Errorf("etcd: get %s: %w", l.cfg.Key, err)
	}
	l.cfg.Counters.Loads.Add(1)
	if rw, ok := l.hist.observe(resp.Header.ClusterId, resp.Header.Revision, true); ok {
		l.rewound(rw, "get")
	}
	l.hist.loaded()
	return l.h.Loaded(resp), nil
}

// ErrRewound ends a watch whose responses belong to another history.
var ErrRewound = errors.New("etcd: the store's history changed (revision went backwards or another cluster)")

// follow watches Key from rev and hands each response to the Handler. It
// returns when the watch ends, reporting whether it got at least one
// response after its creation (so the backoff can start over).
//
// After etcd refuses a watch for the stream's auth token
// (etcd-io/etcd#12385: a stream keeps the token it was opened with), after
// a silence, or when a new watch is not confirmed in time, the next attempt
// uses a new stream, which the client's balancer places on another member;
// the old one may be stalled on a frozen member whose connection still
// looks up.
func (l *Loop) follow(ctx context.Context, rev int64) (healthy bool, err error) {
	defer l.member.Store(0)
	a, err := l.openWatch(ctx, rev)
	if err != nil {
		return false, err
	}
	defer a.cancel()
	pending := []clientv3.WatchResponse{a.first}

	q := newQuietness(l.cfg.Every, SilenceLimit(l.cfg.Every), time.Now())
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
				if err := l.quietTimer(a, q, now); err != nil {
					return healthy, err
				}
				continue
			}
		}
		if err := l.ended(wresp, a.stream, rev); err != nil {
			return healthy, err
		}
		if rw, ok := l.hist.observe(wresp.Header.ClusterId, wresp.Header.Revision, !wresp.Created); ok {
			l.rewound(rw, "watch")
			return healthy, ErrRewound
		}
		q.heard(time.Now())
		l.member.Store(wresp.Header.MemberId)
		if wresp.Created {
			// Confirmed, on a member that answers.
			l.rec.confirmed()
			continue
		}
		healthy = true
		l.h.Apply(wresp)
		rev = max(rev, wresp.Header.Revision)
		var next *clientv3.WatchResponse
		rev, next, err = l.drain(a.wch, rev)
		if err != nil {
			return healthy, err
		}
		if next != nil {
			pending = []clientv3.WatchResponse{*next} // handled above, next
		}
		q.heard(time.Now())
		l.h.Settled(rev)
	}
}

// ended returns why wresp, a response of the watch on stream started at
// rev, ends the watch: a compaction, an error, a cancellation; nil if it
// does not.
func (l *Loop) ended(wresp clientv3.WatchResponse, stream uint64, rev int64) error {
	if wresp.CompactRevision != 0 {
		// The watch fell behind the store's compaction (it was resumed
		// by the client after a lost connection, say): events between
		// rev and the compaction are gone, so only a reload can tell
		// what changed.
		l.cfg.Counters.CompactionReloads.Add(1)
		return fmt.Errorf("etcd: watch %s from revision %d: compacted at %d: %w",
			l.cfg.Key, rev, wresp.CompactRevision, rpctypes.ErrCompacted)
	}
	if err := wresp.Err(); err != nil {
		if tokenRefused(err) {
			l.moveOn(stream)
		}
		return fmt.Errorf("etcd: watch %s: %w", l.cfg.Key, err)
	}
	if wresp.Canceled {
		return fmt.Errorf("etcd: watch %s canceled: %s", l.cfg.Key, wresp.CancelReason)
	}
	return nil
}

// drain applies the watch responses already queued on wch, up to
// drainLimit, so that the Handler settles once for them all: a mass expiry
// arrives as a trickle of responses (etcd revokes about 1,000 leases a
// second), and a list copied per response would fall behind. It returns
// the revision so far, and the first queued response that is not events
// only, for the caller to handle next. A rewind ends the watch with
// ErrRewound.
func (l *Loop) drain(wch clientv3.WatchChan, rev int64) (int64, *clientv3.WatchResponse, error) {
	for range drainLimit {
		more, ok := queued(wch)
		if !ok {
			break
		}
		if !eventsOnly(more) {
			return rev, &more, nil
		}
		if rw, ok := l.hist.observe(more.Header.ClusterId, more.Header.Revision, true); ok {
			l.rewound(rw, "watch")
			return rev, nil, ErrRewound
		}
		l.h.Apply(more)
		rev = max(rev, more.Header.Revision)
		l.member.Store(more.Header.MemberId)
	}
	return rev, nil, nil
}

// drainLimit bounds the queued watch responses applied with one before the
// Handler settles, so that a steady flood still settles regularly.
const drainLimit = 1024

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

// rewound counts a rewind and hands it to the Handler.
func (l *Loop) rewound(rw Rewind, where string) {
	l.cfg.Counters.Rewinds.Add(1)
	l.h.Rewound(rw, where)
}

// staleIfSlow reports the data stale if the etcd call about to be made
// takes longer than the silence limit. The caller stops the returned timer
// when the call returns.
func (l *Loop) staleIfSlow(what string) *time.Timer {
	bound := SilenceLimit(l.cfg.Every)
	return time.AfterFunc(bound, func() {
		l.h.Stale(fmt.Errorf("etcd: %s of %s has not completed within %v", what, l.cfg.Key, bound))
	})
}

// moveOn makes the next watches use a new gRPC stream, unless another
// watch has moved on from stream already.
func (l *Loop) moveOn(stream uint64) {
	l.cfg.Streams.CompareAndSwap(stream, stream+1)
}

// tokenRefused reports whether a watch was refused for the auth token of
// its stream. The etcd client reports the cancel reason as a plain error
// carrying the gRPC status text, so it is matched by text.
func tokenRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, rpctypes.ErrInvalidAuthToken.Error()) ||
		strings.Contains(msg, rpctypes.ErrAuthOldRevision.Error())
}
