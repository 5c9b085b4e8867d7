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
func patientRegistrar(t *testing.T, n int, opts ...etcd.RegistrarOption) (*etcdtest.Cluster, *clientv3.Client, *etcd.Registrar, context.Context) {
	t.Helper()
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p", append([]etcd.RegistrarOption{etcd.WithRequestTimeout(30 * time.Second), etcd.WithTTL(30 * time.Second)}, opts...)...)...)
	ctx := ctxFor(t, 60*time.Second)
	queueInstances(t, ctx, r, n)
	return c, cli, r, ctx
}

// 1,000 concurrent Deregisters: each returns once its own key is gone.
// Each call waits for one answer of the run loop, sent when its key's
// deletion lands (or an attempt fails, or the registrar closes), so no
// caller wakes for another's key: with a wait that looked again on every
// change of the registrar's state, each would wake hundreds of times.
func TestConcurrentDeregistersWakeForTheirOwnKeys(t *testing.T) {
	const n = 1000
	_, cli, r, ctx := patientRegistrar(t, n)
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
	if keys, _ := rawKeys(t, cli, "/p/"); len(keys) != 0 {
		t.Fatalf("%d keys left after every Deregister returned, first %s", len(keys), keys[0])
	}
	if st := r.Status(); st.Instances != 0 {
		t.Fatalf("after every Deregister returned: status %+v, want no instance", st)
	}
}

// Deregisters of one key all return once the key is gone; one whose ctx
// ends first returns ErrPending at once, and the key is still deleted.
// (The run loop forgetting the calls of callers that gave up is
// TestWaitsForgetCallersThatGaveUp.)
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

	for _, cancel := range []context.CancelFunc{cancelShort, cancelAlone} {
		cancel()
		res := <-results
		if !errors.Is(res.err, registry.ErrPending) || !errors.Is(res.err, context.Canceled) {
			t.Fatalf("Deregister %s whose ctx ended: %v, want ErrPending (context canceled)", res.id, res.err)
		}
	}

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
	// A Deregister that runs only after Close has dropped the lease (a
	// loaded machine schedules it late): the key, still in etcd until the
	// revocation lands, must not count as gone then either.
	waitStatus(t, r, 20*time.Second, "Close drops its lease", func(st registry.RegistrarStatus) bool { return st.Session == 0 })
	if err := r.Deregister(ctx, "svc", "i000"); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("a Deregister after Close dropped its lease, i000's key still in etcd (the revocation waits for Heal): %v, "+
			"want ErrClosed, never success", err)
	}
	c.Members()[0].Heal()
	<-closed
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
	r := newRegistrar(t, cli, reg("/p", etcd.WithRequestTimeout(500*time.Millisecond), etcd.WithTTL(30*time.Second))...)
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
	// Deregister while the put of x is on its way: once the registrar has
	// taken x (its status counts it), the put is its next request.
	// Nothing announces a transaction leaving: checked every millisecond.
	for deadline := time.Now().Add(10 * time.Second); r.Status().Pending == 0; time.Sleep(time.Millisecond) {
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
