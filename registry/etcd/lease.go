package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/backoff"
	"google.golang.org/grpc/peer"
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

	cli    *clientv3.Client
	log    *slog.Logger
	header func(*pb.ResponseHeader) // called with every renewal's header

	cancel context.CancelFunc
	done   chan struct{} // closed when the lease is lost or stopped

	mu     sync.Mutex
	err    error  // why the lease ended; set before done is closed
	member uint64 // the member that answered the last renewal
}

// grantLease grants a lease of ttl (rounded up to a second) and starts
// keeping it alive. header, if not nil, is called with the header of every
// renewal's answer, on the lease's goroutine.
func grantLease(ctx context.Context, cli *clientv3.Client, ttl, timeout time.Duration, log *slog.Logger, header func(*pb.ResponseHeader)) (*lease, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	start := time.Now()
	gctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := cli.Grant(gctx, secs)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcd: grant lease: %w", err)
	}
	if header != nil {
		header(resp.ResponseHeader)
	}
	kctx, kcancel := context.WithCancel(ctx)
	l := &lease{
		id:     resp.ID,
		ttl:    time.Duration(resp.TTL) * time.Second,
		cli:    cli,
		log:    log,
		header: header,
		cancel: kcancel,
		done:   make(chan struct{}),
		member: resp.ResponseHeader.GetMemberId(),
	}
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

// Member returns the ID of the etcd member that answered the last renewal.
func (l *lease) Member() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.member
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
	ks := keepAliveStream{lc: pb.NewLeaseClient(l.cli.ActiveConnection()), log: l.log, id: l.id, stalled: make(map[string]time.Time)}
	defer ks.close()

	every := l.ttl / renewEvery
	answer := max(l.ttl/answerWithin, minAnswerWithin)
	expires := granted.Add(l.ttl)
	// Streams that fail outright (refused, reset, a login refused) are
	// opened again with backoff, up to the answer time.
	bo := backoff.New(streamRetry, answer)
	// stalls counts the renewals in a row that were not answered in time.
	// Each next one, on another member, is given twice as long, up to the
	// lease's expiry: a member that stalls is left at once, but a cluster
	// whose every member is merely slow still gets its answers in.
	stalls := 0
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if !time.Now().Before(expires) {
			l.end(fmt.Errorf("%w (lease %x, last renewed %v before)", errLeaseExpired, int64(l.id), l.ttl))
			return
		}
		sent := time.Now()
		within := min(answer<<min(stalls, 8), expires.Sub(sent))
		resp, err := ks.renew(ctx, within)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && resp.TTL <= 0:
			l.end(fmt.Errorf("etcd: lease %x: %w", int64(l.id), rpctypes.ErrLeaseNotFound))
			return
		case err == nil:
			bo.Reset()
			stalls = 0
			expires = sent.Add(time.Duration(resp.TTL) * time.Second)
			l.mu.Lock()
			l.member = resp.Header.GetMemberId()
			l.mu.Unlock()
			if l.header != nil {
				l.header(resp.Header)
			}
			timer.Reset(every)
		case errors.Is(err, errStalled):
			stalls++
			timer.Reset(0) // again at once, on another member
		default:
			timer.Reset(bo.Next())
		}
	}
}

func (l *lease) end(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// errStalled reports a member that did not answer a renewal in time.
var errStalled = errors.New("etcd: lease renewal not answered in time")

// keepAliveStream is the LeaseKeepAlive stream of one lease, reopened on
// another member when a member stalls. New gRPC streams of an etcd client
// are spread round-robin over its members' connections, so a new stream
// usually lands elsewhere; a stream that lands on a member that stalled
// recently is closed and opened again, a few times, before it is used
// anyway (a client with one endpoint has no other member).
type keepAliveStream struct {
	lc  pb.LeaseClient
	log *slog.Logger
	id  clientv3.LeaseID

	stream pb.Lease_LeaseKeepAliveClient
	ctx    context.Context // the stream's context; cancel ends it
	cancel context.CancelFunc
	peer   string
	// stalled holds the peers that stalled, with when; a peer leaves the
	// set when it answers again or after avoidFor.
	stalled map[string]time.Time
}

// avoidFor is how long a member that stalled is avoided.
const avoidFor = time.Minute

// renew sends one renewal and waits up to within for the answer, opening a
// stream first if there is none. On errStalled the stream is closed and
// its member avoided by the next streams.
func (k *keepAliveStream) renew(ctx context.Context, within time.Duration) (*pb.LeaseKeepAliveResponse, error) {
	if k.stream == nil {
		sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		k.cancel = cancel
		k.ctx = sctx
	}
	var fired atomic.Bool
	cancel := k.cancel
	watchdog := time.AfterFunc(within, func() { fired.Store(true); cancel() })
	defer watchdog.Stop()
	var (
		resp *pb.LeaseKeepAliveResponse
		err  error
	)
	if k.stream == nil {
		err = k.open(k.ctx)
	}
	if err == nil {
		err = k.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(k.id)})
	}
	if err == nil {
		resp, err = k.stream.Recv()
	}
	watchdog.Stop()
	if fired.Load() && ctx.Err() == nil {
		if _, known := k.stalled[k.peer]; !known {
			k.log.Warn("etcd member did not answer a lease renewal in time; renewing through another member",
				"peer", k.peer, "waited", within, "lease", fmt.Sprintf("%x", int64(k.id)))
		}
		k.stalled[k.peer] = time.Now()
		k.close()
		return nil, errStalled
	}
	if err != nil {
		k.close()
		return nil, fmt.Errorf("etcd: keep lease %x alive: %w", int64(k.id), err)
	}
	delete(k.stalled, k.peer)
	return resp, nil
}

// open opens a stream with ctx, avoiding members that stalled recently.
func (k *keepAliveStream) open(ctx context.Context) error {
	now := time.Now()
	for p, t := range k.stalled {
		if now.Sub(t) > avoidFor {
			delete(k.stalled, p)
		}
	}
	for attempt := 0; ; attempt++ {
		s, err := k.lc.LeaseKeepAlive(ctx, grpc.WaitForReady(true))
		if err != nil {
			return fmt.Errorf("etcd: open lease keepalive stream: %w", err)
		}
		addr := ""
		if p, ok := peer.FromContext(s.Context()); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		if _, bad := k.stalled[addr]; bad && attempt < 2*len(k.stalled)+2 {
			// Ends the stream without ending ctx: the next stream
			// goes to the next member in the client's rotation.
			_ = s.CloseSend()
			continue
		}
		k.stream, k.peer = s, addr
		return nil
	}
}

func (k *keepAliveStream) close() {
	if k.cancel != nil {
		k.cancel()
	}
	k.stream, k.cancel, k.ctx, k.peer = nil, nil, nil, ""
}
