package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// queueInstances registers n instances i000... of service svc with r
// without waiting for each (an ended ctx queues it), then waits until every
// one is written.
func queueInstances(t *testing.T, ctx context.Context, r *etcd.Registrar, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		done, stop := context.WithCancel(ctx)
		stop() // queued, not waited for
		if err := r.Register(done, instance("svc", fmt.Sprintf("i%03d", i), 10000+i)); err != nil && !errors.Is(err, registry.ErrPending) {
			t.Fatal(err)
		}
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
}

// patientRegistrar starts etcd and a Registrar under /p with a lease TTL
// and a request timeout of 30s (no fault of a test outlasts them), and
// registers n instances with it.
func patientRegistrar(t *testing.T, n int, opts ...etcd.Option) (*etcdtest.Cluster, *clientv3.Client, *etcd.Registrar, context.Context) {
	t.Helper()
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, fast("/p", append([]etcd.Option{etcd.WithRequestTimeout(30 * time.Second), etcd.WithTTL(30 * time.Second)}, opts...)...)...)
	ctx := ctxFor(t, 60*time.Second)
	queueInstances(t, ctx, r, n)
	return c, cli, r, ctx
}

// waitWaiting waits until r holds signals for keys keys, with waiters
// Deregisters waiting on them.
func waitWaiting(t *testing.T, r *etcd.Registrar, keys, waiters int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		k, w := etcd.Waiting(r)
		if k == keys && w == waiters {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys with %d waiting Deregisters, want %d with %d", k, w, keys, waiters)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// 1,000 concurrent Deregisters: each wakes for its own key (and for the
// outcome of the registrar's attempts), not for every status update and
// every transaction landed, which would wake each of them hundreds of
// times.
func TestConcurrentDeregistersWakeForTheirOwnKeys(t *testing.T) {
	const n = 1000
	var woke etcd.WakeupCount
	_, cli, r, ctx := patientRegistrar(t, n, etcd.CountWakeups(&woke))
	before, _ := woke.Load()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Deregister(ctx, "svc", fmt.Sprintf("i%03d", i)); err != nil {
				errs <- fmt.Errorf("Deregister i%03d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total, most := woke.Load()
	total -= before
	t.Logf("%d Deregisters woke %d times in all, at most %d times each", n, total, most)
	// Each wakes once for its key, plus once per failed attempt; a
	// successful attempt sounds no alarm.
	if most > 3 || total > 2*n {
		t.Fatalf("%d Deregisters woke %d times in all, one of them %d times: want at most 3 each, 2 on average", n, total, most)
	}
	if keys, _ := rawKeys(t, cli, "/p/"); len(keys) != 0 {
		t.Fatalf("%d keys left after every Deregister returned, first %s", len(keys), keys[0])
	}
	waitWaiting(t, r, 0, 0)
}

// Deregisters of one key share one signal; one whose ctx ends first leaves
// it, and the signal goes with the last waiter or once the key is gone.
func TestDeregisterSignalsAreSharedAndNotLeaked(t *testing.T) {
	c, cli, r, ctx := patientRegistrar(t, 2)
	// The deletions are on their way and do not land until Heal.
	c.Members()[0].Stall()
	defer c.Members()[0].Heal()

	type result struct {
		id  string
		err error
	}
	results := make(chan result, 4)
	deregister := func(ctx context.Context, id string) {
		go func() { results <- result{id, r.Deregister(ctx, "svc", id)} }()
	}
	short, cancelShort := context.WithCancel(ctx)
	alone, cancelAlone := context.WithCancel(ctx)
	deregister(ctx, "i000")
	deregister(ctx, "i000")
	deregister(short, "i000")
	deregister(alone, "i001")
	waitWaiting(t, r, 2, 4)

	for _, cancel := range []context.CancelFunc{cancelShort, cancelAlone} {
		cancel()
		res := <-results
		if !errors.Is(res.err, registry.ErrPending) || !errors.Is(res.err, context.Canceled) {
			t.Fatalf("Deregister %s whose ctx ended: %v, want ErrPending (context canceled)", res.id, res.err)
		}
	}
	waitWaiting(t, r, 1, 2) // i001's signal went with its only waiter

	c.Members()[0].Heal()
	for i := 0; i < 2; i++ {
		select {
		case res := <-results:
			if res.err != nil || res.id != "i000" {
				t.Fatalf("Deregister %s: %v, want i000 deregistered", res.id, res.err)
			}
		case <-ctx.Done():
			t.Fatal("the Deregisters of i000 did not return after Heal")
		}
	}
	waitWaiting(t, r, 0, 0)
	if keys, _ := rawKeys(t, cli, "/p/svc/i000"); len(keys) != 0 {
		t.Fatalf("key %s left after its Deregisters returned", keys[0])
	}
}

// A Deregister waiting for its key wakes when the registrar closes.
func TestCloseWakesAWaitingDeregister(t *testing.T) {
	c, _, r, ctx := patientRegistrar(t, 1)
	c.Members()[0].Stall()
	defer c.Members()[0].Heal()
	errc := make(chan error, 1)
	go func() { errc <- r.Deregister(ctx, "svc", "i000") }()
	waitWaiting(t, r, 1, 1)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = r.Close() // its revocation waits for Heal
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, registry.ErrClosed) {
			t.Fatalf("Deregister: %v, want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("a waiting Deregister did not return on Close")
	}
	// The Deregister may run only after Close has dropped the lease (a
	// loaded machine schedules it late): the key, still in etcd until the
	// revocation lands, must not count as gone then either.
	waitStatus(t, r, 20*time.Second, "Close drops its lease", func(st registry.RegistrarStatus) bool { return st.Session == 0 })
	if etcd.KeyGone(r, "svc", "i000") {
		t.Fatal("after Close dropped its lease, i000's key (still in etcd: the revocation waits for Heal) counts as gone: " +
			"a Deregister woken late by Close would return success")
	}
	c.Members()[0].Heal()
	<-closed
	waitWaiting(t, r, 0, 0)
}

// A put that etcd answers too late for the registrar (its request timed
// out) may still have been applied. When its instance was deregistered
// meanwhile, the key would stay in etcd, bound to the live lease, with
// nothing left to delete it: the registrar must delete it once etcd
// answers again.
func TestKeyOfATimedOutPutIsDeletedAfterDeregister(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	direct := c.Client(t, c.DirectEndpoints()...)
	// Requests time out after 450ms; the lease needs no answer for 5s.
	r := newRegistrar(t, cli, fast("/p", etcd.WithRequestTimeout(500*time.Millisecond), etcd.WithTTL(30*time.Second))...)
	ctx := ctxFor(t, 60*time.Second)
	if err := r.Register(ctx, instance("svc", "a", 9000)); err != nil {
		t.Fatal(err)
	}
	start, err := direct.Get(ctx, "/p/svc/x")
	if err != nil {
		t.Fatal(err)
	}
	m := c.Members()[0]
	m.Delay(1100 * time.Millisecond) // every request answered after its timeout
	queued, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Register(queued, instance("svc", "x", 9001)); err != nil && !errors.Is(err, registry.ErrPending) {
		t.Fatal(err)
	}
	// Deregister while the put of x is on its way.
	// Nothing announces a transaction leaving: checked every millisecond.
	for deadline := time.Now().Add(10 * time.Second); etcd.InFlight(r) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the put of x not in flight within 10s")
		}
	}
	if err := r.Deregister(ctx, "svc", "x"); err != nil && !errors.Is(err, registry.ErrPending) {
		t.Fatal(err)
	}
	// The put lands (etcd applies it after the client gave up on it);
	// then etcd answers in time again, and the registrar must delete x.
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	events := direct.Watch(wctx, "/p/svc/x", clientv3.WithRev(start.Header.Revision+1))
	next := func(what string) mvccpb.Event_EventType {
		t.Helper()
		for wr := range events {
			if len(wr.Events) > 0 {
				return wr.Events[0].Type
			}
		}
		t.Fatalf("%s: not within 20s", what)
		return 0
	}
	if typ := next("the timed-out put of x applied"); typ != clientv3.EventTypePut {
		t.Fatalf("first event on x: %v, want the put", typ)
	}
	m.Heal()
	if typ := next("the key of the deregistered x, written by a timed-out put, deleted"); typ != clientv3.EventTypeDelete {
		t.Fatalf("event on x after the put: %v, want its deletion", typ)
	}
}
