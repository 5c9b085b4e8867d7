package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"google.golang.org/grpc/peer"

	"github.com/musterhq/muster/internal/backoff"
)

// Renewal timing, as fractions of the TTL. A renewal is sent every
// TTL/renewEvery; an answer is due within TTL/answerWithin, after which the
// member is taken as stalled and the renewal is sent again at once on a
// stream to another member. The last renewal is thus at most
// TTL/renewEvery + TTL/answerWithin = TTL/2 old when a stall is detected.
const (
	renewEvery   = 3
	answerWithin = 6
	// minAnswerWithin keeps very short TTLs from calling a merely slow
	// answer a stall.
	minAnswerWithin = 100 * time.Millisecond
	// streamRetry is the first pause after a keepalive stream failed
	// outright (refused, reset) before a new one is opened.
	streamRetry = 50 * time.Millisecond
)

// errLeaseExpired reports that no renewal was answered within the TTL, so
// etcd has expired the lease, or will have by the time a request reaches
// it.
var errLeaseExpired = errors.New("etcd: lease expired: no renewal answered within its TTL")

// lease is a granted lease kept alive by its own goroutine: grant,
// keepalive and Done, in the shape of etcd's concurrency.Session, but with
// a keepalive that notices a member that holds its stream without
// answering (a frozen process or a partition keeps TCP connections open)
// and moves to another member well before the lease expires. etcd's own
// keepalive waits for the connection to be declared dead, which gRPC's
// keepalive does only after at least 10s, longer than the default TTL.
type lease struct {
	id  clientv3.LeaseID
	ttl time.Duration

	cli *clientv3.Client
	log *slog.Logger

	cancel context.CancelFunc
	done   chan struct{} // closed when the lease is lost or stopped

	mu      sync.Mutex
	err     error     // why the lease ended; set before done is closed
	expires time.Time // etcd keeps the lease at least until then
}

// grantLease grants a lease of ttl (rounded up to a second) and starts
// keeping it alive.
func grantLease(ctx context.Context, cli *clientv3.Client, ttl, timeout time.Duration, log *slog.Logger) (*lease, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	start := time.Now()
	gctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := cli.Grant(gctx, secs)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcd: grant lease: %w", err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	l := &lease{
		id:     resp.ID,
		ttl:    time.Duration(resp.TTL) * time.Second,
		cli:    cli,
		log:    log,
		cancel: kcancel,
		done:   make(chan struct{}),
	}
	l.setExpires(start.Add(l.ttl))
	go l.keepAlive(kctx, start)
	return l, nil
}

// Done is closed when the lease is lost or stopped; Err then says why.
func (l *lease) Done() <-chan struct{} { return l.done }

// Err returns why the lease ended, nil while it lives or after stop.
func (l *lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// left returns how long etcd keeps the lease at least, as of now, counted
// from the last renewal etcd answered (or the grant): a lease found gone
// while left is positive was revoked, not expired.
func (l *lease) left(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires.Sub(now)
}

func (l *lease) setExpires(t time.Time) {
	l.mu.Lock()
	l.expires = t
	l.mu.Unlock()
}

// stop ends the keepalive and waits for it; it does not revoke the lease.
func (l *lease) stop() {
	l.cancel()
	<-l.done
}

// keepAlive renews the lease until ctx ends or the lease is lost. granted
// is when the grant was sent: the lease lives at least until granted + TTL.
func (l *lease) keepAlive(ctx context.Context, granted time.Time) {
	defer close(l.done)
	rn := newRenewer(ctx, pb.NewLeaseClient(l.cli.ActiveConnection()), l.id, l.log)
	defer rn.close()

	every := l.ttl / renewEvery
	answer := max(l.ttl/answerWithin, minAnswerWithin)
	expires := granted.Add(l.ttl)
	// Streams that fail outright (refused, reset, a login refused) are
	// opened again with backoff, up to the answer time.
	bo := backoff.New(streamRetry, answer)
	// unanswered counts the renewals of this round sent and not yet
	// answered. One not answered in time is sent again at once on another
	// member, while the earlier ones may still be answered: a member that
	// stalls is left at once, and a cluster whose members are merely slow
	// still gets its answers in.
	unanswered := 0
	var round time.Time // when the first renewal of this round was sent
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			now := time.Now()
			if !now.Before(expires) {
				l.end(fmt.Errorf("%w (lease %x)", errLeaseExpired, int64(l.id)))
				return
			}
			if unanswered == 0 {
				round = now
			} else {
				rn.stalled()
			}
			within := min(answer, expires.Sub(now))
			if err := rn.send(); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.log.Debug("lease renewal not sent; retrying", "lease", fmt.Sprintf("%x", int64(l.id)), "error", err)
				wait := bo.Next()
				if !unreachable(err) {
					// Refused (a login, a permission): each new
					// stream logs in again, so not faster than
					// renewals are due.
					wait = every
				}
				timer.Reset(min(wait, expires.Sub(now)))
				continue
			}
			unanswered++
			timer.Reset(within)
		case a := <-rn.answers:
			if a.err != nil {
				rn.drop(a.from)
				if unanswered > 0 && len(rn.waiting) == 0 {
					// Nothing left to answer this round: send again
					// soon rather than at the answer time.
					timer.Reset(min(bo.Next(), time.Until(expires)))
				}
				continue
			}
			if a.resp.TTL <= 0 {
				l.end(fmt.Errorf("etcd: lease %x: %w", int64(l.id), rpctypes.ErrLeaseNotFound))
				return
			}
			if unanswered == 0 {
				continue // a late answer to an earlier round
			}
			// Counted from the round's first send: the member may have
			// renewed on that one.
			expires = round.Add(time.Duration(a.resp.TTL) * time.Second)
			l.setExpires(expires)
			rn.answered(a.from)
			bo.Reset()
			unanswered = 0
			timer.Reset(time.Until(round.Add(every)))
		}
	}
}

func (l *lease) end(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// renewer owns the LeaseKeepAlive streams of one lease. Renewals go on the
// current stream; when one is not answered in time (stalled), the next goes
// on a new stream, which avoids the members that stalled (new gRPC streams
// of an etcd client are spread round-robin over its members' connections;
// a stream that lands on a member that stalled recently is closed and
// opened again a few times before it is used anyway, as a client with one
// endpoint has no other member). Stalled streams stay open until a renewal
// is answered, so a late answer still counts.
type renewer struct {
	ctx    context.Context
	cancel context.CancelFunc // ends every stream and receiver
	lc     pb.LeaseClient
	id     clientv3.LeaseID
	log    *slog.Logger

	answers chan renewal
	wg      sync.WaitGroup

	current *renewStream
	waiting []*renewStream // streams with an unanswered renewal
	// avoid holds the peers that stalled, with when; a peer leaves the
	// set when it answers again or after avoidFor.
	avoid map[string]time.Time
}

// renewStream is one LeaseKeepAlive stream and its receiving goroutine.
type renewStream struct {
	s      pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc
	peer   string
}

// renewal is an answer, or the error that ended a stream.
type renewal struct {
	from *renewStream
	resp *pb.LeaseKeepAliveResponse
	err  error
}

// avoidFor is how long a member that stalled is avoided.
const avoidFor = time.Minute

func newRenewer(ctx context.Context, lc pb.LeaseClient, id clientv3.LeaseID, log *slog.Logger) *renewer {
	ctx, cancel := context.WithCancel(ctx)
	return &renewer{ctx: ctx, cancel: cancel, lc: lc, id: id, log: log, answers: make(chan renewal), avoid: make(map[string]time.Time)}
}

// send sends a renewal on the current stream, opening one first if there
// is none.
func (rn *renewer) send() error {
	if rn.current == nil {
		st, err := rn.open()
		if err != nil {
			return err
		}
		rn.current = st
	}
	if err := rn.current.s.Send(&pb.LeaseKeepAliveRequest{ID: int64(rn.id)}); err != nil {
		rn.drop(rn.current)
		return fmt.Errorf("etcd: send lease %x renewal: %w", int64(rn.id), err)
	}
	rn.waiting = append(rn.waiting, rn.current)
	return nil
}

// stalled records that the current stream did not answer in time: its
// member is avoided and the next renewal goes on a new stream.
func (rn *renewer) stalled() {
	st := rn.current
	if st == nil {
		return
	}
	if _, known := rn.avoid[st.peer]; !known {
		rn.log.Warn("etcd member did not answer a lease renewal in time; renewing through another member",
			"peer", st.peer, "lease", fmt.Sprintf("%x", int64(rn.id)))
	}
	rn.avoid[st.peer] = time.Now()
	rn.current = nil // kept in waiting: a late answer still counts
}

// answered makes st, which just answered, the current stream and closes
// the other streams still waiting.
func (rn *renewer) answered(st *renewStream) {
	delete(rn.avoid, st.peer)
	for _, w := range rn.waiting {
		if w != st {
			rn.closeStream(w)
		}
	}
	rn.waiting = rn.waiting[:0]
	if rn.current != nil && rn.current != st {
		rn.closeStream(rn.current)
	}
	rn.current = st
}

// drop forgets a stream that ended.
func (rn *renewer) drop(st *renewStream) {
	rn.closeStream(st)
	if rn.current == st {
		rn.current = nil
	}
	kept := rn.waiting[:0]
	for _, w := range rn.waiting {
		if w != st {
			kept = append(kept, w)
		}
	}
	rn.waiting = kept
}

// open opens a stream, avoiding members that stalled recently, and starts
// its receiving goroutine.
func (rn *renewer) open() (*renewStream, error) {
	now := time.Now()
	for p, t := range rn.avoid {
		if now.Sub(t) > avoidFor {
			delete(rn.avoid, p)
		}
	}
	for attempt := 0; ; attempt++ {
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(rn.ctx))
		// Without WaitForReady the stream fails at once while no
		// connection is ready, and is opened again with backoff.
		s, err := rn.lc.LeaseKeepAlive(sctx)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("etcd: open lease %x keepalive stream: %w", int64(rn.id), err)
		}
		addr := ""
		if p, ok := peer.FromContext(s.Context()); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		if _, bad := rn.avoid[addr]; bad && attempt < 2*len(rn.avoid)+2 {
			cancel() // the next stream goes to the next member in rotation
			continue
		}
		st := &renewStream{s: s, cancel: cancel, peer: addr}
		rn.wg.Add(1)
		go rn.receive(st)
		return st, nil
	}
}

func (rn *renewer) receive(st *renewStream) {
	defer rn.wg.Done()
	for {
		resp, err := st.s.Recv()
		select {
		case rn.answers <- renewal{from: st, resp: resp, err: err}:
		case <-rn.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (rn *renewer) closeStream(st *renewStream) {
	if st != nil {
		st.cancel()
	}
}

// close ends every stream and waits for their goroutines.
func (rn *renewer) close() {
	rn.cancel()
	rn.wg.Wait()
}
