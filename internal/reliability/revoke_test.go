package reliability_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/balancer/wrr"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/resolver"
)

// Fault: the leader frozen (SIGSTOP) past every lease's expiry, then
// thawed, round after round, until etcd has revoked the backends' live
// leases in wantRevoked rounds (see TestFrozenMemberCostsNoRegistration for
// why etcd does that). The registrar puts the keys back under a new lease
// at once, but for that moment the instances are gone from the registry.
// The promise: no trace a call can see. The channel (muster_wrr, 5
// backends of equal weight: 4, and the one that crashes at the end) is
// never handed fewer than its live instances, and every one of them serves
// calls in every 250 ms window, at 1,000 calls/s or more (500 under
// -race): the resolver holds the deletion of an instance that was not
// draining for its grace (resolver.WithDeletionGrace), and the re-put under
// a new lease ends the hold. Protection is off in this channel (it would
// hide a revocation of more than half of the list, not a smaller one): the
// grace alone keeps it whole.
//
// The load that makes etcd commit the revocation, measured: a crowd of 16
// other leases with a shorter TTL, kept alive by another client, and
// members with one CPU each (GOMAXPROCS=1, as in a one-CPU container).
// On resuming, the leader revokes the leases it believes expired, earliest
// first and 16 at a time, each waiting for its proposal. With one CPU its
// first proposals go out before it has stepped down and die with its term;
// after etcd's request timeout (5.2 s here) the next ones, the backends',
// go out from a follower, which forwards them to the new leader, and they
// commit.
//
// A fifth backend then crashes (its server stopped as a crash stops it,
// its registrar's client closed, so its lease lapses): its key leaves the
// registry within TTL + 1 s, no call succeeds on it from then on, and the
// channel drops it when its grace ends.
func TestFrozenLeaderRevocationReachesNoChannel(t *testing.T) {
	const (
		wantRevoked = 3                           // rounds in which etcd revoked the backends' leases
		maxRounds   = 8                           // bounds the test's time: ~10 s a round
		freezeFor   = ttl + 1500*time.Millisecond // past every lease's expiry in the leader's view
		revokeWait  = 7 * time.Second             // etcd's request timeout (5 s + 2 elections) and margin
		crowd       = 16                          // etcd's maxPendingRevokes
		crowdTTL    = 1                           // seconds: the crowd's leases expire before the backends'
		window      = 250 * time.Millisecond
		minRate     = 1000 // calls per second; half under -race
		// A window with fewer calls made (served or failed) says more
		// about the test process's share of the CPU than about the
		// channel: with equal weights muster_wrr picks each of the 5
		// backends once in any 5 picks in a row.
		minJudged = 25
		workers   = 16
	)
	t.Setenv("GOMAXPROCS", "1") // read by the members' processes, which inherit it
	w := newWorld(t, etcdtest.WithProcesses())
	ids := []string{"a", "b", "c", "d"}
	var live []*backend
	for _, id := range ids {
		live = append(live, w.startBackend(t, id))
	}
	victimCli := w.c.Client(t)
	victim := w.startBackendWith(t, victimCli, "e")

	var (
		mu     sync.Mutex
		states []int
	)
	b := resolver.NewBuilder(w.disc, resolver.WithLogger(quiet), resolver.WithProtection(0, time.Second))
	conn := dialRecording(t, b, wrr.Name, func(n int) {
		mu.Lock()
		states = append(states, n)
		mu.Unlock()
	})
	load := startWindowedLoad(conn, workers, window)
	defer load.stop()
	within(t, 10*time.Second, "every backend called", func() bool {
		for _, b := range append(live, victim) {
			if load.total(b.be.Addr) == 0 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	seen := len(states)
	mu.Unlock()
	from := load.now()

	revocations := func() int {
		n := 0
		for _, b := range live {
			n += int(b.reg.Status().Revocations)
		}
		return n
	}
	members := w.c.Members()
	revokedRounds, rounds := 0, 0
	for rounds < maxRounds && revokedRounds < wantRevoked {
		rounds++
		i := w.c.WaitLeader(t)
		lead := members[i]
		// The crowd's client talks to the two members that stay up.
		rest := []string{members[(i+1)%len(members)].DirectEndpoint(), members[(i+2)%len(members)].DirectEndpoint()}
		stopCrowd := keepCrowd(t, w.c.Client(t, rest...), crowd, crowdTTL)
		before := revocations()
		lead.Freeze(t)
		time.Sleep(freezeFor) // the fault's length; nothing to await
		lead.Thaw(t)
		thawed := time.Now()
		for time.Since(thawed) < revokeWait && revocations() == before {
			time.Sleep(20 * time.Millisecond) // polling the registrars' counters
		}
		seenAfter := time.Since(thawed)
		stopCrowd()
		got := revocations() - before
		if got > 0 {
			revokedRounds++
			within(t, 3*time.Second, "every key back under a new lease", func() bool {
				return len(w.keys(t)) == len(ids)+1
			})
		}
		t.Logf("round %d: %s led, frozen %s; etcd revoked %d of the backends' leases (first seen %s after the thaw)", rounds, lead.Name(), fmtDur(freezeFor), got, fmtDur(seenAfter))
	}
	to := load.now()
	if revokedRounds < wantRevoked {
		t.Fatalf("etcd revoked the backends' live leases in %d of %d rounds, want %d: the fault did not happen often enough to prove anything",
			revokedRounds, rounds, wantRevoked)
	}
	mu.Lock()
	during := slices.Clone(states[seen-1:])
	mu.Unlock()
	for _, n := range during {
		if n < len(ids)+1 {
			t.Errorf("the channel was handed %d endpoints during the rounds (states %v), want %d every time", n, during, len(ids)+1)
			break
		}
	}
	rate := float64(load.sum(from, to)) / (time.Duration(to-from) * window).Seconds()
	t.Logf("%d rounds, %d with revocations (%d leases revoked); %d calls in %s (%.0f/s), %d failed; the channel's states: %v",
		rounds, revokedRounds, revocations(), load.sum(from, to), fmtDur(time.Duration(to-from)*window), rate, load.failures(), during)
	floor := minRate
	if raceEnabled {
		// Measured under -race on 2 loaded cores: 1,138–1,192 calls/s,
		// a sixth of the plain build's; the floor keeps a margin.
		floor = minRate / 2
	}
	if rate < float64(floor) {
		t.Errorf("%.0f calls/s, want at least %d", rate, floor)
	}
	all := append(slices.Clone(live), victim)
	judged, starved := 0, 0
	for i := from; i < to; i++ {
		total := load.tried(i)
		if total < minJudged {
			starved++
			continue
		}
		judged++
		for _, b := range all {
			if load.sumOf(b.be.Addr, i, i+1) == 0 {
				t.Errorf("%s (%s) got none of the %d calls made in window %d (%s–%s after the rounds began): it was live throughout",
					b.id, b.be.Addr, total, i-from, fmtDur(time.Duration(i-from)*window), fmtDur(time.Duration(i-from+1)*window))
			}
		}
	}
	t.Logf("%d windows judged, %d with fewer than %d calls made (the test process short of CPU) not judged", judged, starved, minJudged)
	if starved > (judged+starved)/5 {
		t.Errorf("%d of %d windows had fewer than %d calls: too few judged to prove anything", starved, judged+starved, minJudged)
	}
	if failed := load.failures(); failed > 0 {
		t.Errorf("%d calls failed during the rounds, want none", failed)
	}

	// The crash, seen by a watch of its key.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := w.cli.Watch(ctx, key(victim.id), clientv3.WithCreatedNotify())
	<-events
	crashWindow := load.now()
	victim.be.Crash(t)
	_ = victimCli.Close() // no renewal, no revocation: the lease lapses
	crashed := time.Now()
	var gone time.Duration
	for gone == 0 {
		select {
		case resp := <-events:
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					gone = time.Since(crashed)
				}
			}
		case <-ctx.Done():
			t.Fatal("the crashed backend's key was not deleted within 30 s")
		}
	}
	// Calls in flight at the crash have ended long before (the key goes
	// a TTL later): none may succeed from here on.
	served := load.total(victim.be.Addr)
	if gone > ttl+time.Second {
		t.Errorf("the crashed backend's key was deleted %s after the crash, want within TTL + 1 s", fmtDur(gone))
	}
	dropped := within(t, resolver.DefaultDeletionGrace+time.Second, "the crashed backend out of the channel's state", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return states[len(states)-1] == len(ids)
	})
	end := load.now()
	load.stop()
	if n := load.total(victim.be.Addr); n != served {
		t.Errorf("the crashed backend served %d calls after the crash", n-served)
	}
	for i := crashWindow + 1; i < end; i++ {
		for _, b := range live {
			if total := load.tried(i); total >= minJudged && load.sumOf(b.be.Addr, i, i+1) == 0 {
				t.Errorf("%s got none of the %d calls made in window %d after the crash", b.id, total, i-crashWindow)
			}
		}
	}
	t.Logf("crashed backend's key gone %s after the crash, out of the channel's state %s later; %d calls failed in all (at most %d in flight at the crash)",
		fmtDur(gone), fmtDur(dropped), load.failures(), workers)
	if failed := load.failures(); failed > workers {
		t.Errorf("%d calls failed, more than the %d in flight when the backend crashed", failed, workers)
	}
}

// keepCrowd grants n leases of ttl seconds through cli and keeps them
// alive until the returned function is called, which revokes them.
func keepCrowd(t *testing.T, cli *clientv3.Client, n int, ttl int64) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var ids []clientv3.LeaseID
	for range n {
		// A member thawed a round ago, with one CPU, may be slow to
		// forward a grant: 10 s.
		gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := cli.Grant(gctx, ttl)
		gcancel()
		if err != nil {
			cancel()
			t.Fatalf("grant a crowd lease: %v", err)
		}
		ids = append(ids, l.ID)
		ch, err := cli.KeepAlive(ctx, l.ID)
		if err != nil {
			cancel()
			t.Fatalf("keep a crowd lease alive: %v", err)
		}
		go func() {
			for range ch {
			}
		}()
	}
	return func() {
		cancel()
		for _, id := range ids {
			rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = cli.Revoke(rctx, id)
			rcancel()
		}
	}
}

// windowedLoad calls through a channel from several workers, counting the
// calls each backend served in each window since it started.
type windowedLoad struct {
	start  time.Time
	window time.Duration
	quit   chan struct{}
	done   sync.WaitGroup
	once   sync.Once

	mu     sync.Mutex
	counts map[string][]int // calls served, per address, per window
	tries  []int            // calls made, served or failed, per window
	failed int
}

func startWindowedLoad(conn grpc.ClientConnInterface, workers int, window time.Duration) *windowedLoad {
	l := &windowedLoad{start: time.Now(), window: window, quit: make(chan struct{}), counts: map[string][]int{}}
	for range workers {
		l.done.Go(func() {
			for {
				select {
				case <-l.quit:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				addr, err := testbackend.Call(ctx, conn)
				cancel()
				i := l.now()
				l.mu.Lock()
				for len(l.tries) <= i {
					l.tries = append(l.tries, 0)
				}
				l.tries[i]++
				if err != nil {
					l.failed++
				} else {
					c := l.counts[addr]
					for len(c) <= i {
						c = append(c, 0)
					}
					c[i]++
					l.counts[addr] = c
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// now is the index of the current window.
func (l *windowedLoad) now() int { return int(time.Since(l.start) / l.window) }

func (l *windowedLoad) stop() {
	l.once.Do(func() { close(l.quit) })
	l.done.Wait()
}

func (l *windowedLoad) total(addr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.counts[addr] {
		n += c
	}
	return n
}

// sum is the number of calls served in windows [from, to).
func (l *windowedLoad) sum(from, to int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.counts {
		for i := from; i < to && i < len(c); i++ {
			n += c[i]
		}
	}
	return n
}

// tried is the number of calls made (served or failed) in window i.
func (l *windowedLoad) tried(i int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i < len(l.tries) {
		return l.tries[i]
	}
	return 0
}

// sumOf is the number of calls addr served in windows [from, to).
func (l *windowedLoad) sumOf(addr string, from, to int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	c := l.counts[addr]
	for i := from; i < to && i < len(c); i++ {
		n += c[i]
	}
	return n
}

func (l *windowedLoad) failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}
