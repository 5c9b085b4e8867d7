package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// Methods and errors of etcd counted by etcdtest.RPCStats.
const (
	methodPut   = "/etcdserverpb.KV/Put"
	methodTxn   = "/etcdserverpb.KV/Txn"
	tooManyOps  = "etcdserver: too many operations in txn request"
	duplicateOp = "etcdserver: duplicate key given in txn request"
	// requestTooLarge is rpctypes.ErrRequestTooLarge's message.
	requestTooLarge = "etcdserver: request is too large"
)

// mirrorFunc is a Mirror from a function.
type mirrorFunc func(in registry.Instance) (string, []byte, error)

func (f mirrorFunc) Mirror(in registry.Instance) (string, []byte, error) { return f(in) }

// copyUnder mirrors every instance to <prefix>/<name>/<id> with the
// address as its value.
func copyUnder(prefix string) etcd.Mirror {
	return mirrorFunc(func(in registry.Instance) (string, []byte, error) {
		return prefix + "/" + in.Name + "/" + in.ID, []byte(in.Addr), nil
	})
}

// registerConcurrently registers n instances i000... of service svc, each
// from its own goroutine, and returns their errors by ID.
func registerConcurrently(t *testing.T, ctx context.Context, r *etcd.Registrar, n int) map[string]error {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs = map[string]error{}
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := instance("svc", fmt.Sprintf("i%03d", i), 10000+i)
			err := r.Register(ctx, in)
			mu.Lock()
			errs[in.ID] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errs
}

func requireNoErrors(t *testing.T, errs map[string]error) {
	t.Helper()
	for id, err := range errs {
		if err != nil {
			t.Fatalf("Register %s: %v", id, err)
		}
	}
}

// requireBoundTo checks that prefix holds exactly want keys, each bound to
// lease, and returns the keys.
func requireBoundTo(t *testing.T, cli *clientv3.Client, prefix string, want int, lease int64) []string {
	t.Helper()
	keys, leases := rawKeys(t, cli, prefix)
	if len(keys) != want {
		t.Fatalf("%d keys under %s, want %d", len(keys), prefix, want)
	}
	for _, k := range keys {
		if leases[k] != lease {
			t.Fatalf("key %s is bound to lease %x, want %x", k, leases[k], lease)
		}
	}
	return keys
}

func TestRegistrarWritesManyInstancesPerTransaction(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p")...)
	ctx := ctxFor(t, 60*time.Second)
	const n = 1000
	before := c.RPCStats().Calls
	requireNoErrors(t, registerConcurrently(t, ctx, r, n))
	after := c.RPCStats().Calls
	st := r.Status()
	if !st.Registered || st.Instances != n || st.Pending != 0 {
		t.Fatalf("status %+v, want %d instances registered", st, n)
	}
	requireBoundTo(t, cli, "/p/svc/", n, st.Session)
	writes := after[methodPut] + after[methodTxn] - before[methodPut] - before[methodTxn]
	// 128 operations per transaction: 8 transactions at best; Registers
	// arriving while one is in flight make the first ones smaller.
	if writes > n/20 {
		t.Fatalf("%d instances took %d write requests (Put %d, Txn %d); want at most %d: many instances per transaction",
			n, writes, after[methodPut]-before[methodPut], after[methodTxn]-before[methodTxn], n/20)
	}
	t.Logf("%d instances in %d write requests", n, writes)
}

func TestRegistrarSplitsTransactionsEtcdRefusesAsTooLarge(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithMaxTxnOps(8))
	cli := c.Client(t)
	// Two operations per instance (its key and its copy): the default
	// of 128 operations is 16 times what this etcd takes.
	r := newRegistrar(t, cli, reg("/p", etcd.WithMirror(copyUnder("/copy")))...)
	ctx := ctxFor(t, 60*time.Second)
	requireNoErrors(t, registerConcurrently(t, ctx, r, 100))
	lease := r.Status().Session
	requireBoundTo(t, cli, "/p/svc/", 100, lease)
	requireBoundTo(t, cli, "/copy/svc/", 100, lease)
	refused := c.RPCStats().Errors[tooManyOps]
	if refused == 0 {
		t.Fatal("etcd refused no transaction: the test does not exercise the fallback")
	}

	// The registrar keeps to the smaller size: more instances, no more
	// refusals.
	more := make([]registry.Instance, 100)
	for i := range more {
		more[i] = instance("svc", fmt.Sprintf("j%03d", i), 11000+i)
		done, stop := context.WithCancel(ctx)
		stop() // queued, not waited for
		if err := r.Register(done, more[i]); err != nil && !errors.Is(err, registry.ErrPending) {
			t.Fatal(err)
		}
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	requireBoundTo(t, cli, "/p/svc/", 200, lease)
	requireBoundTo(t, cli, "/copy/svc/", 200, lease)
	if again := c.RPCStats().Errors[tooManyOps]; again != refused {
		t.Fatalf("etcd refused %d more transactions as too large after the first %d: the registrar did not keep to a size etcd takes",
			again-refused, refused)
	}
}

func TestInstanceRefusedForItsOwnReasonDoesNotHoldBackOthers(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	// The copy of "bad" is its own key: etcd refuses any transaction
	// that holds it (duplicate key), and only that instance's.
	mirror := mirrorFunc(func(in registry.Instance) (string, []byte, error) {
		if in.ID == "bad" {
			return registry.Key("/p", in.Name, in.ID), []byte("x"), nil
		}
		return "/copy/" + in.Name + "/" + in.ID, []byte(in.Addr), nil
	})
	r := newRegistrar(t, cli, reg("/p", etcd.WithMirror(mirror))...)
	ctx := ctxFor(t, 60*time.Second)
	badErr := make(chan error, 1)
	go func() { badErr <- r.Register(ctx, instance("svc", "bad", 9999)) }()
	requireNoErrors(t, registerConcurrently(t, ctx, r, 100))
	if err := <-badErr; !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Fatalf("Register of the instance etcd refuses: %v, want the duplicate key error", err)
	}
	st := r.Status()
	if !st.Registered || st.Instances != 100 {
		t.Fatalf("status %+v, want the 100 others registered", st)
	}
	keys := requireBoundTo(t, cli, "/p/svc/", 100, st.Session)
	for _, k := range keys {
		if strings.HasSuffix(k, "/bad") {
			t.Fatalf("the refused instance has a key: %s", k)
		}
	}
	requireBoundTo(t, cli, "/copy/svc/", 100, st.Session)
}

// Under the request limit muster serve sets, instances of the largest
// value validation lets through are written many per transaction without
// a refusal; one too large even alone (two copies of its own size) is
// refused at once, with its size in the error.
func TestTransactionsStayUnderServesRequestLimit(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithMaxRequestBytes(embedetcd.MaxRequestBytes))
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p")...)
	ctx := ctxFor(t, 60*time.Second)
	const n = 8
	for i := range n {
		// Queued, not waited for, so that the registrar writes them
		// together.
		done, stop := context.WithCancel(ctx)
		stop()
		if err := r.Register(done, registrytest.LargestInstance("svc", i)); err != nil && !errors.Is(err, registry.ErrPending) {
			t.Fatal(err)
		}
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	requireBoundTo(t, cli, "/p/svc/", n, r.Status().Session)
	stats := c.RPCStats()
	if refused := stats.Errors[requestTooLarge]; refused > 0 {
		t.Fatalf("etcd refused %d transactions as too large: the registrar's transactions do not keep under %d bytes", refused, embedetcd.MaxRequestBytes)
	}
	t.Logf("%d instances of %d bytes in %d transactions", n, len(mustMarshal(t, registrytest.LargestInstance("svc", 0))), stats.Calls[methodTxn])

	twice := newRegistrar(t, cli, reg("/p", etcd.WithMirror(copyUnder("/a"), mirrorFunc(func(in registry.Instance) (string, []byte, error) {
		v, err := registry.Marshal(in)
		return "/b/" + in.Name + "/" + in.ID, v, err
	}), mirrorFunc(func(in registry.Instance) (string, []byte, error) {
		v, err := registry.Marshal(in)
		return "/c/" + in.Name + "/" + in.ID, v, err
	})))...)
	in := registrytest.LargestInstance("big", 0)
	err := twice.Register(ctx, in)
	if !errors.Is(err, rpctypes.ErrRequestTooLarge) || !regexp.MustCompile(`etcd: put /p/big/0000<+: etcdserver: request is too large: .* are \d+ bytes`).MatchString(err.Error()) {
		t.Fatalf("Register of an instance with two copies of its size: %v; want etcd's refusal naming the key and the size", err)
	}
	t.Log(err)
}

// mustMarshal returns in's value.
func mustMarshal(t *testing.T, in registry.Instance) []byte {
	t.Helper()
	v, err := registry.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLeaseLossRewritesEveryInstanceInTransactions(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	logs := &lockedBuffer{}
	r := newRegistrar(t, cli, reg("/p", etcd.WithMirror(copyUnder("/copy")),
		etcd.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))...)
	ctx := ctxFor(t, 60*time.Second)
	const n = 500
	requireNoErrors(t, registerConcurrently(t, ctx, r, n))
	old := clientv3.LeaseID(r.Status().Session)

	before := c.RPCStats().Calls
	if _, err := cli.Revoke(ctx, old); err != nil {
		t.Fatal(err)
	}
	// The revocation deletes every key; the registrar sees its keys go
	// (or its keepalive fails), grants a new lease and writes them again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := r.Status()
		if st.Registered && st.Session != int64(old) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not registered again under a new lease 20s after the revocation: %+v", st)
		}
		time.Sleep(20 * time.Millisecond) // polling the status; no event to await
	}
	lease := r.Status().Session
	requireBoundTo(t, cli, "/p/svc/", n, lease)
	requireBoundTo(t, cli, "/copy/svc/", n, lease)
	after := c.RPCStats().Calls
	if writes := after[methodPut] + after[methodTxn] - before[methodPut] - before[methodTxn]; writes > n/10 {
		t.Fatalf("re-registering %d instances took %d write requests, want at most %d", n, writes, n/10)
	}
	// The revocation deleted every key at once: a line per watch
	// response, not one per key.
	if lines := logs.count("deleted from etcd"); lines > 5 {
		t.Fatalf("%d log lines about deleted keys for one revocation, want a few", lines)
	}
	ttl, err := cli.TimeToLive(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("the lost lease %x still lives (TTL %d)", old, ttl.TTL)
	}
}

func TestDeregisterWhileATransactionIsInFlight(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p", etcd.WithMirror(copyUnder("/copy")), etcd.WithRequestTimeout(10*time.Second))...)
	ctx := ctxFor(t, 60*time.Second)
	// Every request takes 100ms longer: the Deregisters arrive while the
	// registrar's transactions are on their way.
	c.Members()[0].Delay(100 * time.Millisecond)
	const n = 300
	for i := 0; i < n; i++ {
		done, stop := context.WithCancel(ctx)
		stop() // queued, not waited for
		if err := r.Register(done, instance("svc", fmt.Sprintf("i%03d", i), 10000+i)); err != nil && !errors.Is(err, registry.ErrPending) {
			t.Fatal(err)
		}
	}
	// Once the lease is granted, the first transaction is on its way.
	waitStatus(t, r, 10*time.Second, "a lease granted", func(st registry.RegistrarStatus) bool { return st.Session != 0 })
	var wg sync.WaitGroup
	deregistered := map[string]bool{}
	var mu sync.Mutex
	returnedAt := map[string]int64{} // etcd's revision once Deregister returned
	errs := make(chan error, n)
	for i := n - 1; i >= 0; i -= 3 {
		id := fmt.Sprintf("i%03d", i)
		deregistered[id] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Deregister(ctx, "svc", id); err != nil {
				errs <- fmt.Errorf("Deregister %s: %w", id, err)
				return
			}
			resp, err := cli.Get(ctx, "/p/svc/"+id)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			returnedAt[id] = resp.Header.Revision
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	c.Members()[0].Heal()
	st := r.Status()
	want := n - len(deregistered)
	if !st.Registered || st.Instances != want {
		t.Fatalf("status %+v, want %d instances registered", st, want)
	}
	keys := requireBoundTo(t, cli, "/p/svc/", want, st.Session)
	requireBoundTo(t, cli, "/copy/svc/", want, st.Session)
	for _, k := range keys {
		if deregistered[k[strings.LastIndexByte(k, '/')+1:]] {
			t.Fatalf("deregistered instance still has its key %s", k)
		}
	}
	// Deregister returns once the key is gone: no transaction in flight
	// writes it afterwards. The history of the prefix says.
	for _, ev := range historyOf(t, ctx, cli, "/p/svc/") {
		if at, ok := returnedAt[string(ev.Kv.Key[len("/p/svc/"):])]; ok && ev.Type == clientv3.EventTypePut && ev.Kv.ModRevision > at {
			t.Fatalf("%s written at revision %d, after its Deregister returned (revision %d)", ev.Kv.Key, ev.Kv.ModRevision, at)
		}
	}
}

// historyOf returns every event under prefix from the first revision to
// now, in order: it reads the watch history up to a key it writes beside
// the prefix.
func historyOf(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) []*clientv3.Event {
	t.Helper()
	end := strings.TrimSuffix(prefix, "/") + "~end"
	if _, err := cli.Put(ctx, end, ""); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var evs []*clientv3.Event
	for wr := range cli.Watch(wctx, strings.TrimSuffix(prefix, "/"), clientv3.WithPrefix(), clientv3.WithRev(1)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("reading the history of %s: %v", prefix, err)
		}
		for _, ev := range wr.Events {
			if string(ev.Kv.Key) == end {
				return evs
			}
			if strings.HasPrefix(string(ev.Kv.Key), prefix) {
				evs = append(evs, ev)
			}
		}
	}
	t.Fatalf("the watch of %s ended before reaching %s", prefix, end)
	return nil
}

func TestDeletionEtcdRefusesHoldsBackNoRegistration(t *testing.T) {
	// Seven copies per instance: a put (the key and its copies, 8
	// operations) fits etcd's limit of 8, the deletion (the key, its
	// override and the copies, 9 in one nested transaction) never does.
	c := etcdtest.Start(t, etcdtest.WithMaxTxnOps(8))
	cli := c.Client(t)
	var mirrors []etcd.Mirror
	for i := range 7 {
		mirrors = append(mirrors, copyUnder(fmt.Sprintf("/copy%d", i)))
	}
	r := newRegistrar(t, cli, reg("/p", etcd.WithMirror(mirrors...))...)
	ctx := ctxFor(t, 60*time.Second)
	if err := r.Register(ctx, instance("svc", "a", 9000)); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	err := r.Deregister(short, "svc", "a")
	cancel()
	if err == nil {
		t.Fatal("Deregister of a key whose deletion etcd refuses returned nil")
	}
	if c.RPCStats().Errors[tooManyOps] == 0 {
		t.Fatal("etcd refused no transaction: the test does not exercise a refused deletion")
	}
	// The refused deletion is retried, and holds back no registration.
	if err := r.Register(ctx, instance("svc", "b", 9001)); err != nil {
		t.Fatalf("Register after a deletion etcd refuses: %v", err)
	}
	resp, err := cli.Get(ctx, "/p/svc/b")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the key of b: %v, %v", resp, err)
	}
}

// A Deregister waiting for a deletion etcd refuses returns once the lease
// is lost: its key went with the lease, and is not written under the new
// one. (Nothing else answers it: etcd answers every attempt, and the
// registrar, with nothing left to write, makes no more.)
func TestDeregisterReturnsWhenTheLeaseGoesWithItsKey(t *testing.T) {
	// As in TestDeletionEtcdRefusesHoldsBackNoRegistration: the deletion
	// never fits etcd's limit of operations.
	c := etcdtest.Start(t, etcdtest.WithMaxTxnOps(8))
	cli := c.Client(t)
	var mirrors []etcd.Mirror
	for i := range 7 {
		mirrors = append(mirrors, copyUnder(fmt.Sprintf("/copy%d", i)))
	}
	const timeout = 10 * time.Second
	r := newRegistrar(t, cli, reg("/p", etcd.WithMirror(mirrors...), etcd.WithRequestTimeout(timeout))...)
	ctx := ctxFor(t, 60*time.Second)
	if err := r.Register(ctx, instance("svc", "a", 9000)); err != nil {
		t.Fatal(err)
	}
	lease := clientv3.LeaseID(r.Status().Session)
	refusals := c.RPCStats().Errors[tooManyOps]
	errc := make(chan error, 1)
	go func() { errc <- r.Deregister(ctx, "svc", "a") }()
	for c.RPCStats().Errors[tooManyOps] == refusals {
		if ctx.Err() != nil {
			t.Fatal("etcd refused no deletion")
		}
		time.Sleep(5 * time.Millisecond) // etcd's counters are polled; nothing to await
	}
	select {
	case err := <-errc:
		t.Fatalf("Deregister returned %v while its key was still in etcd", err)
	default:
	}
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Deregister after its key went with the lease: %v, want nil", err)
		}
		t.Logf("Deregister returned %v after the revocation", time.Since(revoked).Round(time.Millisecond))
	case <-time.After(2 * timeout):
		t.Fatal("Deregister did not return after its key went with the lease")
	}
	if keys, _ := rawKeys(t, cli, "/p/svc/"); len(keys) != 0 {
		t.Fatalf("keys %v left", keys)
	}
}

// A Deregister that arrives while a transaction writing its key is on its
// way, a transaction etcd then refuses for that instance alone: nothing is
// written and the attempt succeeds (the refused instance is dropped), so
// no failure answers the call. The Deregister learns that its key is gone
// once the transaction has landed.
func TestDeregisterWakesWhenARefusedWriteLands(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	// A "bad…" instance's copy is its own key: etcd refuses the
	// transaction that holds it (duplicate key).
	mirror := mirrorFunc(func(in registry.Instance) (string, []byte, error) {
		if strings.HasPrefix(in.ID, "bad") {
			return registry.Key("/p", in.Name, in.ID), []byte("x"), nil
		}
		return "/copy/" + in.Name + "/" + in.ID, []byte(in.Addr), nil
	})
	// The registrar logs each instance it drops: a Deregister called
	// before the line of its instance is there arrived while the refused
	// transaction was on its way.
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError}))
	r := newRegistrar(t, cli, reg("/p", etcd.WithMirror(mirror), etcd.WithTTL(30*time.Second), etcd.WithLogger(log))...)
	ctx := ctxFor(t, 60*time.Second)
	queueInstances(t, ctx, r, 1) // the lease is granted
	// Answers take 300ms to come back: a Deregister called once etcd has
	// refused the transaction arrives while the registrar still waits
	// for the answer. Should it arrive after all (a loaded machine), it
	// returns at once and the test tries again.
	c.Members()[0].Delay(300 * time.Millisecond)
	defer c.Members()[0].Heal()
	dup := rpctypes.ErrDuplicateKey.Error()
	for try := 0; ; try++ {
		if try == 5 {
			t.Fatal("no Deregister arrived while its refused write was on its way: the test did not exercise the wait")
		}
		id := fmt.Sprintf("bad%d", try)
		refused := c.RPCStats().Errors[dup]
		done, stop := context.WithCancel(ctx)
		stop() // queued, not waited for
		if err := r.Register(done, instance("svc", id, 9000+try)); err != nil && !errors.Is(err, registry.ErrPending) {
			t.Fatal(err)
		}
		for c.RPCStats().Errors[dup] == refused {
			if ctx.Err() != nil {
				t.Fatal("etcd did not refuse the transaction of the bad instance")
			}
			time.Sleep(time.Millisecond)
		}
		dropped := "/p/svc/" + id + " error"
		early := logs.count(dropped) == 0
		if err := r.Deregister(ctx, "svc", id); err != nil {
			t.Fatalf("Deregister %s: %v", id, err)
		}
		if logs.count(dropped) != 1 {
			t.Fatalf("the refused %s logged %d times as dropped, want once", id, logs.count(dropped))
		}
		if early {
			break // it arrived before the refusal, and waited for it
		}
	}
	if keys, _ := rawKeys(t, cli, "/p/svc/bad"); len(keys) != 0 {
		t.Fatalf("key %s written", keys[0])
	}
}

// An instance larger than etcd's request limit and gRPC's margin over it
// is refused by gRPC before etcd sees it (ResourceExhausted, "larger than
// max"): Register returns that refusal at once with the instance's size,
// as for etcd's own, rather than the registrar retrying it forever.
func TestInstanceOverGRPCLimitRefused(t *testing.T) {
	const limit = 64 << 10 // gRPC then takes at most limit + 512 KiB
	c := etcdtest.Start(t, etcdtest.WithMaxRequestBytes(limit))
	cli := c.Client(t)
	copyAs := func(root string) etcd.Mirror {
		return mirrorFunc(func(in registry.Instance) (string, []byte, error) {
			v, err := registry.Marshal(in)
			return root + in.Name + "/" + in.ID, v, err
		})
	}
	r := newRegistrar(t, cli, reg("/p", etcd.WithMirror(copyAs("/a/"), copyAs("/b/"), copyAs("/c/")))...)
	ctx := ctxFor(t, 30*time.Second)
	err := r.Register(ctx, registrytest.LargestInstance("big", 0))
	if status.Code(err) != codes.ResourceExhausted || !regexp.MustCompile(`larger than max.* are \d+ bytes`).MatchString(err.Error()) {
		t.Fatalf("Register of an instance four times over gRPC's limit: %v; want gRPC's refusal with the size, at once", err)
	}
	t.Log(err)
	if err := r.Register(ctx, registry.Instance{Name: "small", Addr: "127.0.0.1:9001"}); err != nil {
		t.Fatalf("Register of a small instance after the refusal: %v", err)
	}
}
