package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

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
func (s *service) hedgeDelay() time.Duration { return s.d.opts.progressEvery / 8 }

// maxHedged is the most concurrent attempts of one request.
const maxHedged = 3

// hedging reports whether requests are hedged now: while recovering, with
// more than one endpoint to go to.
func (s *service) hedging() bool {
	return s.recovering && len(s.d.cli.Endpoints()) > 1
}

// get reads the whole service, hedged while recovering.
func (s *service) get(ctx context.Context) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.attemptTimeout())
	defer cancel()
	if !s.hedging() {
		return s.d.cli.Get(ctx, s.prefix, clientv3.WithPrefix())
	}
	type result struct {
		resp *clientv3.GetResponse
		err  error
	}
	results := make(chan result, maxHedged) // never blocks a Get
	get := func() {
		resp, err := s.d.cli.Get(ctx, s.prefix, clientv3.WithPrefix())
		results <- result{resp, err}
	}
	go get()
	hedge := time.NewTicker(s.hedgeDelay())
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

// openWatch opens the service's watch from rev and waits until etcd
// confirms it, within the attempt timeout: the watch blocks until then,
// which waits out an outage, or forever if the request was lost on a
// connection that stays up. While recovering, a second attempt starts on a
// new gRPC stream after hedgeDelay, and a watch created by the member that
// went silent is given up for another (landedOnAvoided). The caller cancels
// the returned attempt; its first response is still to be handled.
func (s *service) openWatch(ctx context.Context, rev int64) (*watchAttempt, error) {
	bound := s.attemptTimeout()
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	slow := s.staleIfSlow("watch creation")
	defer slow.Stop()
	results := make(chan *watchAttempt, maxHedged) // never blocks an attempt
	var attempts []*watchAttempt
	start := func(stream uint64) {
		a := &watchAttempt{stream: stream}
		a.ctx, a.cancel = context.WithCancel(metadata.AppendToOutgoingContext(
			clientv3.WithRequireLeader(ctx), watchStreamKey, strconv.FormatUint(stream, 10)))
		attempts = append(attempts, a)
		go func() {
			a.wch = s.d.cli.Watch(a.ctx, s.prefix, clientv3.WithPrefix(),
				clientv3.WithRev(rev), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
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
	moveOn := func() {
		last := attempts[len(attempts)-1].stream
		s.d.watchStream.CompareAndSwap(last, last+1)
	}
	start(s.d.watchStream.Load())
	var hedge <-chan time.Time
	if s.hedging() {
		t := time.NewTicker(s.hedgeDelay())
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
			s.recovering = true
			s.quickFailed++
			return nil, fmt.Errorf("etcd: watch of %s not confirmed within %v", s.prefix, bound)
		case <-hedge:
			if len(attempts) < maxHedged {
				moveOn()
				start(s.d.watchStream.Load())
				pending++
			}
		case a := <-results:
			pending--
			switch {
			case !a.ok:
				lastErr = errors.New("etcd: watch channel closed before the watch was confirmed")
			case a.first.Created && a.first.Err() == nil && s.landedOnAvoided(a.first.Header.MemberId):
				lastErr = fmt.Errorf("etcd: new watch of %s landed on member %x, silent before", s.prefix, a.first.Header.MemberId)
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
			start(s.d.watchStream.Load())
			pending++
		}
	}
}
