package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// The faults that the instances' watch has long been tested against,
// played against the two other users of the same watch loop: a service
// setting (a canary) and a registrar's watch of its own keys.

// canaryReader returns a function that reads ch until it yields want,
// failing the test after within.
func canaryReader(t *testing.T, ch <-chan registry.Canary) func(want registry.Canary, within time.Duration) {
	return func(want registry.Canary, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case got := <-ch:
				if got == want {
					return
				}
			case <-deadline:
				t.Fatalf("canary %+v not seen within %v", want, within)
			}
		}
	}
}

// watchCanary follows the canary of svc through cli and returns its
// canaryReader.
func watchCanary(t *testing.T, ctx context.Context, cli *clientv3.Client, opts []etcd.WatchOption) func(registry.Canary, time.Duration) {
	t.Helper()
	cs, err := etcd.NewCanaries(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return canaryReader(t, cs.WatchCanary(ctx, "svc"))
}

// setCanary sets the canary of svc through cli.
func setCanary(t *testing.T, ctx context.Context, cli *clientv3.Client, cn registry.Canary, opts []etcd.WriteOption) {
	t.Helper()
	if err := etcd.SetCanary(ctx, cli, "svc", cn, opts...); err != nil {
		t.Fatal(err)
	}
}

// others returns the direct endpoints of every member of c but m.
func others(c *etcdtest.Cluster, m *etcdtest.Member) []string {
	var eps []string
	for _, o := range c.Members() {
		if o != m {
			eps = append(eps, o.DirectEndpoint())
		}
	}
	return eps
}

// TestOwnKeyWatchMovesOffAStalledMember stalls each member's client
// traffic in turn (its connections stay up and nothing answers, as with a
// frozen machine or a partition), deletes a registered key by hand through
// the other members, and requires the registrar to write it again, on its
// lease, within a bound: 2.5 progress intervals of silence, a Get and a
// watch that may land on the stalled member once more, and a write that
// may too (each bounded by the request timeout). The audit, which would
// also find the key missing, runs once an hour and the lease outlives the
// test, so the repair is the watch's. One of the rounds stalls the member
// the registrar's watch is on, whichever it is (the watch moves only when
// its member goes silent); without the silence detection that round never
// sees its deletion.
func TestOwnKeyWatchMovesOffAStalledMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithSize(3))
	cli := c.Client(t) // all three members, through their proxies
	r := newRegistrar(t, cli, reg("/p", etcd.WithTTL(time.Minute), etcd.WithAuditInterval(time.Hour),
		etcd.WithRequestTimeout(time.Second), etcd.WithBackoff(50*time.Millisecond, 200*time.Millisecond))...)
	ctx := ctxFor(t, 2*time.Minute)
	for _, id := range []string{"a", "b"} {
		if err := r.Register(ctx, instance("svc", id, 9000)); err != nil {
			t.Fatal(err)
		}
	}
	lease := r.Status().Session
	const bound = 8 * time.Second // silence 0.5 s, a Get, a watch and a write of up to 1 s each on the stalled member, backoff
	for i, m := range c.Members() {
		writer := c.Client(t, others(c, m)...)
		m.Stall()
		if err := retryElection(ctx, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := writer.Delete(ctx, "/p/svc/a")
			return err
		}); err != nil {
			m.Heal()
			t.Fatal(err)
		}
		start := time.Now()
		waitKeys(t, writer, "/p/svc/", bound, fmt.Sprintf("round %d (%s stalled): a written again", i, m.Name()),
			func(keys []string, leases map[string]int64) bool {
				return len(keys) == 2 && leases["/p/svc/a"] == lease
			})
		t.Logf("round %d (%s stalled): a written again after %v", i, m.Name(), time.Since(start).Round(time.Millisecond))
		m.Heal()
	}
	// Not a count of repairs: a write that timed out on the stalled
	// member is retried, and a deletion seen meanwhile is not a repair.
	if st := r.Status(); st.Session != lease || st.Reregistrations != 0 {
		t.Fatalf("status %+v: want lease %x kept", st, lease)
	}
}

// retryElection calls op again for up to 10 s while etcd answers "leader
// changed" or "no leader": a stall holds client traffic only, but on a
// loaded machine the members may still elect a leader again (once under
// two CPU-bound loops, a write 0.15 s into a test was caught in an
// election).
func retryElection(ctx context.Context, op func(context.Context) error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := op(ctx)
		if err == nil || time.Now().After(deadline) ||
			!(errors.Is(err, rpctypes.ErrLeaderChanged) || errors.Is(err, rpctypes.ErrNoLeader)) {
			return err
		}
		pause := time.NewTimer(50 * time.Millisecond) // an election has no event to await here
		select {
		case <-ctx.Done():
			pause.Stop()
			return err
		case <-pause.C:
		}
	}
}

// registerAB registers the instances a and b of svc with r, waits until
// they are written and returns their lease.
func registerAB(t *testing.T, ctx context.Context, r *etcd.Registrar) int64 {
	t.Helper()
	for _, id := range []string{"a", "b"} {
		if err := r.Register(ctx, instance("svc", id, 9000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	return r.Status().Session
}

// followerToKill starts a cluster of three members and returns it, a
// follower (killing it needs no election) and a client of the others.
func followerToKill(t *testing.T) (*etcdtest.Cluster, *etcdtest.Member, *clientv3.Client) {
	c := etcdtest.Start(t, etcdtest.WithSize(3))
	leader := c.WaitLeader(t)
	x := c.Members()[(leader+1)%3]
	return c, x, c.Client(t, others(c, x)...)
}

// TestOwnKeyWatchReloadsAfterCompaction reaches the compaction branch with
// the registrar's watch of its own keys live: the member its client talks
// to (the only endpoint) is killed, a registered key is deleted through the
// other members, the store is compacted past the deletion, and the member
// comes back well within the silence limit. The etcd client resumes the
// watch from the revision after the last it delivered, which is compacted;
// the deletion is gone from etcd's history, so only the audit that follows
// the new watch can find the key missing. The periodic audit runs once an
// hour and the progress interval is long, so the key comes back only
// through the compaction path, and on the registrar's lease. Then the new
// watch must be live, from a revision etcd still has: over the next two
// seconds no watch is created again (a watch from the compacted revision
// would be refused and created again after each backoff), and another key
// deleted by hand is written again within a second.
func TestOwnKeyWatchReloadsAfterCompaction(t *testing.T) {
	c, x, writer := followerToKill(t)
	const every = 6 * time.Second
	r := newRegistrar(t, c.Client(t, x.Endpoint()), reg("/p", etcd.WithProgressInterval(every),
		etcd.WithTTL(time.Minute), etcd.WithAuditInterval(time.Hour))...)
	ctx := ctxFor(t, time.Minute)
	lease := registerAB(t, ctx, r)

	killed, back := compactBehind(t, c, x, writer, every, func() {
		if _, err := writer.Delete(ctx, "/p/svc/a"); err != nil {
			t.Fatal(err)
		}
	})
	waitKeys(t, writer, "/p/svc/", 2*every, "a written again after the compaction", func(keys []string, leases map[string]int64) bool {
		return len(keys) == 2 && leases["/p/svc/a"] == lease
	})
	t.Logf("member back %v after the kill; a written again %v after the kill", back.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	creates := c.RPCStats().Calls[etcdtest.MethodWatchCreate]
	time.Sleep(2 * time.Second) // a window to count in, no event to await
	if n := c.RPCStats().Calls[etcdtest.MethodWatchCreate] - creates; n > 1 {
		t.Fatalf("%d watches created in the 2 s after the repair, want at most 1: the watch does not settle", n)
	}
	if _, err := writer.Delete(ctx, "/p/svc/b"); err != nil {
		t.Fatal(err)
	}
	waitKeys(t, writer, "/p/svc/", time.Second, "b, deleted after the compaction, written again within 1s", func(keys []string, leases map[string]int64) bool {
		return len(keys) == 2 && leases["/p/svc/b"] == lease
	})
}

// TestRestoreIsRepairedByTheOwnKeyWatch restores etcd from a backup taken
// before an instance was registered and another one changed: the lease
// survives (it was in the backup), the key and the change are lost, with
// no event a watch could see. The periodic audit runs once an hour, so the
// repair must come from the registrar's watch of its own keys, which the
// etcd client resumes on the restored store. Which way depends on timing:
// when the resumed watch answers progress requests, its headers are below
// the registrar's last write but not below any header it saw before (the
// writes are puts, which it filters out), so only the comparison with the
// last write asks for the audit; when it does not answer, the silence gives
// it up, and the audit follows the new watch. Without the comparison the
// test failed in 2 of 6 runs; without the silence detection, in every run.
func TestRestoreIsRepairedByTheOwnKeyWatch(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	// A TTL long enough that the keepalive survives the restore's
	// outage: the repair must not be a re-registration.
	r := newRegistrar(t, cli, reg("/p", etcd.WithTTL(30*time.Second), etcd.WithAuditInterval(time.Hour),
		etcd.WithProgressInterval(2*time.Second))...)
	ctx := ctxFor(t, time.Minute)
	a := instance("svc", "a", 9000)
	if err := r.Register(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	backup := c.Backup(t)
	a.Weight = 200
	for _, in := range []registry.Instance{a, instance("svc", "b", 9001)} {
		if err := r.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	lease := r.Status().Session
	c.Restore(t, backup)
	restored := time.Now()
	const bound = 8 * time.Second // a reconnect, a progress interval (or 2.5 of silence), an audit and its writes
	waitRestoreRepaired(t, ctx, cli, r, lease, bound)
	t.Logf("repaired %v after the restore returned", time.Since(restored).Round(time.Millisecond))
}

// TestCanaryWatchReloadsAfterCompaction reaches the compaction branch with
// a canary's watch live: the member its client talks to (the only
// endpoint) is killed, the canary changed through the other members, the
// store compacted past the follower's revision, and the member comes back
// well within the silence limit. The etcd client resumes the watch from a
// compacted revision; the follower must read the setting again and deliver
// the change before a silence could have ended the watch, and then follow
// the next change at once.
func TestCanaryWatchReloadsAfterCompaction(t *testing.T) {
	c, x, writer := followerToKill(t)
	const every = 6 * time.Second
	opts, wopts := watching("/p", etcd.WithProgressInterval(every)), writes("/p")
	ctx := ctxFor(t, time.Minute)
	next := watchCanary(t, ctx, c.Client(t, x.Endpoint()), opts)
	old := registry.Canary{Color: "blue", Percent: 10}
	setCanary(t, ctx, writer, old, wopts)
	next(old, 10*time.Second)

	later := registry.Canary{Color: "green", Percent: 20}
	killed, back := compactBehind(t, c, x, writer, every, func() {
		setCanary(t, ctx, writer, later, wopts)
	})
	next(later, 2*every)
	t.Logf("member back %v after the kill; the change seen %v after the kill", back.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	last := registry.Canary{Color: "green", Percent: 30}
	setCanary(t, ctx, writer, last, wopts)
	next(last, time.Second)
}

// TestCanaryFollowsEtcdRestartedEmpty restarts etcd with an empty data
// directory, as a new cluster on the same endpoint: revisions start again
// below the ones the follower saw, and the canary is gone. The follower
// must deliver the absence of a canary (the zero Canary), then a canary set
// in the new history.
func TestCanaryFollowsEtcdRestartedEmpty(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	opts := watching("/p", etcd.WithRequestTimeout(time.Second), etcd.WithBackoff(50*time.Millisecond, 200*time.Millisecond))
	wopts := writes("/p", etcd.WithRequestTimeout(time.Second))
	ctx := ctxFor(t, time.Minute)
	next := watchCanary(t, ctx, cli, opts)
	old := registry.Canary{Color: "blue", Percent: 10}
	setCanary(t, ctx, cli, old, wopts)
	next(old, 10*time.Second)
	for i := 0; i < 30; i++ { // the old history runs well ahead of the new one
		putRaw(t, cli, "/other/k", fmt.Sprint(i))
	}

	c.Wipe(t)
	wiped := time.Now()
	const bound = 6 * time.Second // a reconnect, 2.5 progress intervals, a Get, backoff
	next(registry.Canary{}, bound)
	t.Logf("the canary's absence seen %v after the wipe", time.Since(wiped).Round(time.Millisecond))
	after := registry.Canary{Color: "green", Percent: 5}
	setCanary(t, ctx, cli, after, wopts)
	start := time.Now()
	next(after, bound)
	t.Logf("a canary set in the new history seen after %v", time.Since(start).Round(time.Millisecond))
}

// frozenRounds freezes (SIGSTOP) each member of c in turn, so that one of
// the rounds freezes the member a watch is on, whichever it is: its TCP
// connections stay up and nothing answers; if it led, the others elect a
// leader. In each round change makes a change through the other members,
// and seen must see it within bound of the freeze; then the member is
// thawed and caught up before the next round, which may need it for a
// quorum.
func frozenRounds(t *testing.T, c *etcdtest.Cluster, bound time.Duration, change func(round int, writer *clientv3.Client), seen func(round int, within time.Duration)) {
	t.Helper()
	for i, m := range c.Members() {
		writer := writerAvoiding(t, c, m)
		m.Freeze(t)
		start := time.Now()
		change(i, writer)
		seen(i, max(bound-time.Since(start), 0))
		t.Logf("round %d (%s frozen): the change seen %v after the freeze", i, m.Name(), time.Since(start).Round(time.Millisecond))
		m.Thaw(t)
		waitServes(t, c, m)
	}
}

// retrying calls op with attempts of one second until one succeeds, for
// at most bound: a proposal a follower forwarded to a frozen leader is lost.
func retrying(t *testing.T, bound time.Duration, what string, op func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := op(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no attempt succeeded within %v: %v", what, bound, err)
		}
	}
}

// frozenWatchBound is the bound of the frozen-member tests of a canary and
// of a registrar's keys, with a progress interval of 1 s and a request
// timeout of 2 s: silence noticed after 2.5 s, then a Get and a watch
// creation that may land on the frozen member (given up after 0.5 s, 1 s,
// 2 s, and hedged), a write that may too (2 s), backoff between.
const frozenWatchBound = 10 * time.Second

// TestCanaryWatchMovesOffAFrozenMember freezes each member in turn,
// changes the canary through the others, and requires the change within
// frozenWatchBound. The follower's client has all three endpoints, so its
// balancer may place the reload and the new watch on the frozen member
// again.
func TestCanaryWatchMovesOffAFrozenMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithSize(3), etcdtest.WithProcesses())
	opts := []etcd.WatchOption{etcd.WithPrefix("/p"), etcd.WithProgressInterval(time.Second), etcd.WithRequestTimeout(2 * time.Second)}
	ctx := ctxFor(t, 2*time.Minute)
	next := watchCanary(t, ctx, c.Client(t), opts)
	next(registry.Canary{}, 10*time.Second)
	want := func(round int) registry.Canary { return registry.Canary{Color: "blue", Percent: float64(10 + round)} }
	frozenRounds(t, c, frozenWatchBound, func(round int, writer *clientv3.Client) {
		retrying(t, frozenWatchBound, "set the canary", func(ctx context.Context) error {
			return etcd.SetCanary(ctx, writer, "svc", want(round), writes("/p")...)
		})
	}, func(round int, within time.Duration) { next(want(round), within) })
}

// TestOwnKeyWatchMovesOffAFrozenMember freezes each member in turn,
// deletes a registered key through the others, and requires the registrar
// to write it again on its lease within frozenWatchBound. The audit runs
// once an hour and the lease outlives the test, so the repair is the
// watch's, which must notice the silence of the frozen member (without the
// silence detection the round that freezes the watch's member never sees
// its deletion); the registrar's client has all three endpoints.
func TestOwnKeyWatchMovesOffAFrozenMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithSize(3), etcdtest.WithProcesses())
	r := newRegistrar(t, c.Client(t), etcd.WithPrefix("/p"), etcd.WithProgressInterval(time.Second), etcd.WithRequestTimeout(2*time.Second),
		etcd.WithTTL(time.Minute), etcd.WithAuditInterval(time.Hour))
	ctx := ctxFor(t, 2*time.Minute)
	lease := registerAB(t, ctx, r)
	var writer *clientv3.Client
	frozenRounds(t, c, frozenWatchBound, func(round int, w *clientv3.Client) {
		writer = w
		retrying(t, frozenWatchBound, "delete a", func(ctx context.Context) error {
			_, err := w.Delete(ctx, "/p/svc/a")
			return err
		})
	}, func(round int, within time.Duration) {
		waitKeys(t, writer, "/p/svc/", within, fmt.Sprintf("round %d: a written again", round), func(keys []string, leases map[string]int64) bool {
			return len(keys) == 2 && leases["/p/svc/a"] == lease
		})
	})
}
