package watchloop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

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
// watch is given up, the key to be read again, with an error; otherwise
// progress is requested when due and the timer set again.
func (l *Loop) quietTimer(a *watchAttempt, q *quietness, now time.Time) error {
	quiet := now.Sub(q.lastHeard)
	if quiet >= q.limit {
		// Not even a progress notification: the connection is gone or
		// stalled (a frozen member keeps its TCP connections up).
		// Reloading (the Get waits for etcd to answer) and watching
		// again on another stream is the only way to be sure nothing
		// was missed; a watch the client resumes by itself after an
		// outage may start past the store's revision and so never
		// answer a progress request on a quiet store.
		l.moveOn(a.stream)
		l.cfg.Counters.SilenceReloads.Add(1)
		l.rec.silenced(l.member.Load())
		return &silenceError{key: l.cfg.Key, quiet: quiet.Round(time.Millisecond)}
	}
	deadline := q.lastHeard.Add(q.limit)
	if !now.Before(q.nextProbe) {
		// Answered by a progress notification on this watch's stream, if
		// the stream is alive. The context carries the same metadata, so
		// it selects the same stream. Bounded so that the silence is
		// still noticed on time.
		pctx, pcancel := context.WithDeadline(a.ctx, minTime(now.Add(q.every), deadline))
		_ = l.cfg.Client.RequestProgress(pctx)
		pcancel()
		q.nextProbe = time.Now().Add(q.every)
	}
	q.timer.Reset(max(time.Until(minTime(q.nextProbe, deadline)), time.Millisecond))
	return nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Reopening a watch, and the Get before it, after a silence.
//
// The etcd client sends requests over one gRPC connection per member and
// places each new request or stream on the next member, round robin. A
// frozen member (SIGSTOP, a stalled network) keeps its TCP connection up,
// so the client keeps placing requests on it, and they hang. While
// recovering from a silence, a Get or a watch creation not answered within
// hedgeDelay is therefore started again, concurrently (a new watch on a new
// gRPC stream), up to maxHedged times at once, which the client places on
// other members; the first answer wins and the others are cancelled. More
// than two, because other requests on the same client move the round robin
// on meanwhile, and can move it back to the frozen member.

// hedgeDelay is how long a request made while recovering waits before
// another one is started: an eighth of the progress interval (250ms by
// default), far above a healthy etcd's answer, so that three attempts fit in
// the first attempt's bound (half an interval).
func (l *Loop) hedgeDelay() time.Duration { return l.cfg.Every / 8 }

// maxHedged is the most concurrent attempts of one request.
const maxHedged = 3

// hedging reports whether requests are hedged now: while recovering, with
// more than one endpoint to go to.
func (l *Loop) hedging() bool {
	return l.rec.hedging(len(l.cfg.Client.Endpoints()))
}

// attemptTimeout bounds the next Get or watch creation (recovery's
// attemptTimeout with the Loop's configuration).
func (l *Loop) attemptTimeout() time.Duration {
	return l.rec.attemptTimeout(l.cfg.Every, l.cfg.RequestTimeout)
}

// recovery is a Loop's state after a silent or unconfirmed watch, until
// a new watch is confirmed: whether it is recovering, the member to avoid,
// and how many attempts failed meanwhile, which set the bound of the next
// attempt and whether requests are hedged. It is pure logic, owned by the
// Loop's goroutine; the zero value is not recovering.
type recovery struct {
	avoid       uint64 // member that went silent; a new watch should land elsewhere
	avoided     int    // new watches rejected for landing on avoid
	recovering  bool   // since a silence or an unconfirmed watch, until a watch is confirmed
	quickFailed int    // attempts failed while recovering; each doubles the next bound
}

// silenced starts a recovery after the watch on member went silent.
func (r *recovery) silenced(member uint64) {
	*r = recovery{recovering: true, avoid: member}
}

// unconfirmed records a watch not confirmed within its bound: recovering
// from now on, if not already, and the next bound doubled.
func (r *recovery) unconfirmed() {
	r.recovering = true
	r.quickFailed++
}

// failed records an attempt failed otherwise (a Get): while recovering,
// the next bound doubles.
func (r *recovery) failed() {
	if r.recovering {
		r.quickFailed++
	}
}

// confirmed ends the recovery: a watch was confirmed, on a member that
// answers.
func (r *recovery) confirmed() { *r = recovery{} }

// hedging reports whether requests are hedged: while recovering, with
// more than one endpoint to go to.
func (r *recovery) hedging(endpoints int) bool {
	return r.recovering && endpoints > 1
}

// landedOnAvoided reports whether a watch just created on member should be
// given up because that member's watch went silent just before. A client
// with one endpoint has no other member to try, and after two such
// landings the member is accepted: it answered, so it is not frozen.
func (r *recovery) landedOnAvoided(member uint64, endpoints int) bool {
	if r.avoid == 0 || member != r.avoid || r.avoided >= 2 || endpoints < 2 {
		return false
	}
	r.avoided++
	return true
}

// attemptTimeout bounds the next Get or watch creation. Normally the
// request timeout; while recovering from a silent or unconfirmed watch, half
// a progress interval doubling with each failed attempt up to the request
// timeout, so that an attempt the client's balancer placed on the member
// that went silent (a frozen member's connection still looks up) is given
// up quickly, and an attempt on a merely slow etcd still gets time.
func (r *recovery) attemptTimeout(progressEvery, requestTimeout time.Duration) time.Duration {
	if !r.recovering {
		return requestTimeout
	}
	b := progressEvery / 2
	for i := 0; i < r.quickFailed && b < requestTimeout; i++ {
		b *= 2
	}
	return min(b, requestTimeout)
}

// get reads Key, hedged while recovering.
func (l *Loop) get(ctx context.Context) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, l.attemptTimeout())
	defer cancel()
	if !l.hedging() {
		return l.cfg.Client.Get(ctx, l.cfg.Key, l.cfg.GetOptions...)
	}
	type result struct {
		resp *clientv3.GetResponse
		err  error
	}
	results := make(chan result, maxHedged) // never blocks a Get
	get := func() {
		resp, err := l.cfg.Client.Get(ctx, l.cfg.Key, l.cfg.GetOptions...)
		results <- result{resp, err}
	}
	go get()
	hedge := time.NewTicker(l.hedgeDelay())
	defer hedge.Stop()
	started, failed := 1, 0
	for {
		select {
		case r := <-results:
			if r.err == nil {
				return r.resp, nil // cancel ends the others
			}
			failed++
			if failed == started && (started == maxHedged || ctx.Err() != nil) {
				return nil, r.err
			}
			if failed == started { // all failed fast: try again at once
				started++
				go get()
			}
		case <-hedge.C:
			if started < maxHedged {
				started++
				go get()
			}
		}
	}
}

// watchAttempt is a watch being opened on one gRPC stream.
type watchAttempt struct {
	stream uint64
	ctx    context.Context
	cancel context.CancelFunc
	wch    clientv3.WatchChan
	first  clientv3.WatchResponse // the creation response (WithCreatedNotify)
	ok     bool                   // first was received
}

// openWatch opens the watch of Key from rev and waits until etcd
// confirms it, within the attempt timeout: the watch blocks until then,
// which waits out an outage, or forever if the request was lost on a
// connection that stays up. While recovering, a second attempt starts on a
// new gRPC stream after hedgeDelay, and a watch created by the member that
// went silent is given up for another (landedOnAvoided). The caller cancels
// the returned attempt; its first response is still to be handled.
func (l *Loop) openWatch(ctx context.Context, rev int64) (*watchAttempt, error) {
	bound := l.attemptTimeout()
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	slow := l.staleIfSlow("watch creation")
	defer slow.Stop()
	results := make(chan *watchAttempt, maxHedged) // never blocks an attempt
	var attempts []*watchAttempt
	start := func(stream uint64) {
		a := &watchAttempt{stream: stream}
		a.ctx, a.cancel = context.WithCancel(metadata.AppendToOutgoingContext(
			clientv3.WithRequireLeader(ctx), StreamKey, l.cfg.StreamTag+strconv.FormatUint(stream, 10)))
		attempts = append(attempts, a)
		go func() {
			opts := append([]clientv3.OpOption{clientv3.WithRev(rev), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify()},
				l.cfg.WatchOptions...)
			a.wch = l.cfg.Client.Watch(a.ctx, l.cfg.Key, opts...)
			a.first, a.ok = <-a.wch
			results <- a
		}()
	}
	cancelAll := func(except *watchAttempt) {
		for _, a := range attempts {
			if a != except {
				a.cancel()
			}
		}
	}
	// moveOn makes the next watches use a new gRPC stream.
	moveOn := func() { l.moveOn(attempts[len(attempts)-1].stream) }
	start(l.cfg.Streams.Load())
	var hedge <-chan time.Time
	if l.hedging() {
		t := time.NewTicker(l.hedgeDelay())
		defer t.Stop()
		hedge = t.C
	}
	pending := 1
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			cancelAll(nil)
			return nil, ctx.Err()
		case <-deadline.C:
			cancelAll(nil)
			moveOn()
			l.rec.unconfirmed()
			return nil, fmt.Errorf("etcd: watch of %s not confirmed within %v", l.cfg.Key, bound)
		case <-hedge:
			if len(attempts) < maxHedged {
				moveOn()
				start(l.cfg.Streams.Load())
				pending++
			}
		case a := <-results:
			pending--
			switch {
			case !a.ok:
				lastErr = errors.New("etcd: watch channel closed before the watch was confirmed")
			case a.first.Created && a.first.Err() == nil && l.rec.landedOnAvoided(a.first.Header.MemberId, len(l.cfg.Client.Endpoints())):
				lastErr = fmt.Errorf("etcd: new watch of %s landed on member %x, silent before", l.cfg.Key, a.first.Header.MemberId)
			default:
				cancelAll(a)
				return a, nil
			}
			a.cancel()
			if pending > 0 {
				continue
			}
			if hedge == nil || len(attempts) >= maxHedged {
				moveOn()
				return nil, lastErr
			}
			// Every attempt failed before the next hedge: try another
			// stream at once.
			moveOn()
			start(l.cfg.Streams.Load())
			pending++
		}
	}
}

// silenceError is the error of a watch that heard nothing, not even a
// progress notification, for its silence limit: a timeout
// (context.DeadlineExceeded), as health reports class it.
type silenceError struct {
	key   string
	quiet time.Duration
}

func (e *silenceError) Error() string {
	return fmt.Sprintf("etcd: no response on the watch of %s for %v", e.key, e.quiet)
}

func (e *silenceError) Unwrap() error { return context.DeadlineExceeded }
