package etcd_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/syncbuf"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func TestStalledDiscoveryReconcilesAfterCompaction(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	// The registrar writes directly; only the discovery goes through the
	// proxy that is stalled (a partition between it and etcd).
	direct := c.Client(t, c.DirectEndpoints()...)
	viaProxy := c.Client(t)
	r := newRegistrar(t, direct, reg("/p", etcd.WithTTL(30*time.Second))...)
	d := newDiscovery(t, viaProxy, disc("/p")...)
	ctx := ctxFor(t, 60*time.Second)
	for _, id := range []string{"a", "b"} {
		if err := r.Register(ctx, instance("svc", id, 9000)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "a and b", registrytest.HasIDs("a", "b"))
	resyncs := d.Stats().Resyncs

	m.Stall()
	// Stale, and for the stall: the watch ended and the reload begun (its
	// Get waits for the stall, and is marked stale when it is slow). A
	// watch creation slow on a loaded machine marks the snapshot stale
	// too, and a watch that lives through a short stall needs no reload.
	registrytest.WaitFor(t, w, "stale, the watch ended by the stall", func(s registry.Snapshot) bool {
		return s.Stale() && d.Stats().Resyncs > resyncs
	})
	if err := r.Deregister(ctx, "svc", "a"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c", "d"} {
		if err := r.Register(ctx, instance("svc", id, 9000)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ { // revisions to compact away
		if _, err := direct.Put(ctx, "/other/k", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	c.Compact(t)
	if s := w.Snapshot(); fmt.Sprint(registrytest.IDs(s)) != "[a b]" {
		t.Fatalf("cache changed while stalled: %s", registrytest.Describe(s))
	}
	m.Heal()
	registrytest.WaitFor(t, w, "b, c, d and fresh after the stall", func(s registry.Snapshot) bool {
		return registrytest.HasIDs("b", "c", "d")(s) && !s.Stale()
	})
}

func TestHundredWatchersShareOneEtcdWatch(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	base := etcdtest.WatcherCount(t)
	d := newDiscovery(t, cli, disc("/p")...)
	r := newRegistrar(t, cli, reg("/p")...)
	ctx := ctxFor(t, 30*time.Second)
	var ws []registry.Watcher
	for i := 0; i < 100; i++ {
		w, err := d.Watch(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if err := r.Register(ctx, instance("svc", "a", 9000)); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		registrytest.WaitFor(t, w, "a at every watcher", registrytest.HasIDs("a"))
	}
	// The registrar watches its own keys' service too (for deletions).
	waitWatchers(t, base+2, "one etcd watch for 100 watchers of one service, and the registrar's own")
	if st := d.Stats(); st.Services != 1 || st.Watchers != 100 {
		t.Fatalf("stats %+v, want 1 service and 100 watchers", st)
	}
	for _, w := range ws {
		_ = w.Close()
	}
	if st := d.Stats(); st.Services != 0 || st.Watchers != 0 {
		t.Fatalf("stats after closing every watcher %+v, want none", st)
	}
	waitWatchers(t, base+1, "no Discovery watch after every watcher closed (the registrar's remains)")
}

// waitWatchers waits until the etcd server's own gauge of watchers reads
// want and stays there for a moment (so that a second watch being set up
// would be seen).
func waitWatchers(t *testing.T, want float64, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	steady := 0
	for steady < 5 {
		if etcdtest.WatcherCount(t) == want {
			steady++
		} else {
			steady = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the etcd server counts %v watchers, want %v", what, etcdtest.WatcherCount(t), want)
		}
		time.Sleep(20 * time.Millisecond) // the server's gauge is polled; nothing to await
	}
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct{ syncbuf.Buffer }

func (l *lockedBuffer) count(s string) int {
	return strings.Count(l.String(), s)
}

func TestMalformedValuesAreSkippedOneByOne(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	logs := &lockedBuffer{}
	d := newDiscovery(t, cli, disc("/p", etcd.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))...)
	r := newRegistrar(t, cli, reg("/p")...)
	ctx := ctxFor(t, 30*time.Second)
	if err := r.Register(ctx, instance("svc", "good", 9000)); err != nil {
		t.Fatal(err)
	}
	good, _ := registry.Marshal(instance("svc", "x", 1))
	bad := map[string]string{
		"/p/svc/garbage":  "not json",
		"/p/svc/future":   `{"v":2,"id":"future","name":"svc","addr":"h:1"}`,
		"/p/svc/mismatch": string(good), // value says id x
		"/p/svc/badaddr":  `{"v":1,"id":"badaddr","name":"svc","addr":"nope"}`,
	}
	for k, v := range bad {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "only the good instance", registrytest.HasIDs("good"))
	if got := d.Stats().SkippedValues; got != 4 {
		t.Fatalf("SkippedValues = %d after the load, want 4; stats %+v; log:\n%s", got, d.Stats(), logs.String())
	}

	// A bad value arriving as a watch event, and one good value replacing a
	// bad one.
	if _, err := cli.Put(ctx, "/p/svc/late", "{"); err != nil {
		t.Fatal(err)
	}
	fixed, _ := registry.Marshal(instance("svc", "garbage", 9001))
	if _, err := cli.Put(ctx, "/p/svc/garbage", string(fixed)); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "the fixed value served", registrytest.HasIDs("garbage", "good"))
	// A bad value is counted once per mod revision, across reloads: only
	// a rewind (Stats.Rewinds) reports them again. The stats and the log
	// say which happened when this fails.
	if got := d.Stats().SkippedValues; got != 5 {
		t.Fatalf("SkippedValues = %d, want 5; stats %+v; log:\n%s", got, d.Stats(), logs.String())
	}
	// A good instance turning bad leaves the list; the others stay.
	if _, err := cli.Put(ctx, "/p/svc/garbage", "broken again"); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "the broken value dropped", registrytest.HasIDs("good"))
	if got := logs.count("key=/p/svc/future"); got != 1 {
		t.Fatalf("the bad value of /p/svc/future was logged %d times, want once:\n%s", got, logs.String())
	}
}

func TestWatchAfterCloseAndLinger(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	base := etcdtest.WatcherCount(t)
	d := newDiscovery(t, cli, disc("/p", etcd.WithLinger(time.Hour))...)
	ctx := ctxFor(t, 30*time.Second)
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "loaded", registrytest.HasIDs())
	_ = w.Close()
	// Lingering: a new watcher finds the service warm, on the same etcd
	// watch.
	w2, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	if s := w2.Snapshot(); !s.Loaded {
		t.Fatalf("a watcher after the linger start found a cold cache: %s", registrytest.Describe(s))
	}
	waitWatchers(t, base+1, "one etcd watch for a lingering service watched again")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-w2.Updates():
		if ok {
			// a pending notification; the next receive must see the close
			if _, ok := <-w2.Updates(); ok {
				t.Fatalf("Updates still open after Discovery.Close")
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Updates not closed by Discovery.Close")
	}
	if _, err := d.Watch(context.Background(), "svc"); err != registry.ErrClosed {
		t.Fatalf("Watch after Close = %v, want ErrClosed", err)
	}
}

// Snapshots share unchanged instances: the same pointer from one snapshot
// to the next, so that consumers find changes by comparing pointers. A
// changed instance (here by an override) is a new pointer; a value written
// again unchanged keeps its pointer.
func TestUnchangedInstancesKeepTheirPointers(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p")...)
	d := newDiscovery(t, cli, disc("/p")...)
	ctx := ctxFor(t, 30*time.Second)
	register := func(id string) {
		t.Helper()
		if err := r.Register(ctx, instance("svc", id, 9000)); err != nil {
			t.Fatal(err)
		}
	}
	register("a")
	register("b")
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	byID := func(s registry.Snapshot) map[string]*registry.Instance {
		m := map[string]*registry.Instance{}
		for _, in := range s.Instances {
			m[in.ID] = in
		}
		return m
	}
	first := byID(registrytest.WaitFor(t, w, "a and b", registrytest.HasIDs("a", "b")))

	register("c")
	second := byID(registrytest.WaitFor(t, w, "a, b and c", registrytest.HasIDs("a", "b", "c")))
	if second["a"] != first["a"] || second["b"] != first["b"] {
		t.Fatalf("adding c replaced unchanged instances: a %p → %p, b %p → %p", first["a"], second["a"], first["b"], second["b"])
	}

	zero := 0
	if err := etcd.SetOverride(ctx, cli, "svc", "b", registry.Override{Weight: &zero}, etcd.WithPrefix("/p")); err != nil {
		t.Fatal(err)
	}
	third := byID(registrytest.WaitFor(t, w, "b drained", func(s registry.Snapshot) bool {
		b := byID(s)["b"]
		return b != nil && b.Draining
	}))
	if third["b"] == second["b"] || second["b"].Draining {
		t.Fatalf("the override did not make a new instance for b, or changed the old one: %+v, %+v", second["b"], third["b"])
	}
	if third["a"] != first["a"] || third["c"] != second["c"] {
		t.Fatal("an override of b replaced a or c")
	}

	// a's value written again as it is, then d registered: when d is seen,
	// a's rewrite was applied before it.
	resp, err := cli.Get(ctx, registry.Key("/p", "svc", "a"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get a: %v, %d keys", err, len(resp.Kvs))
	}
	kv := resp.Kvs[0]
	if _, err := cli.Put(ctx, string(kv.Key), string(kv.Value), clientv3.WithLease(clientv3.LeaseID(kv.Lease))); err != nil {
		t.Fatal(err)
	}
	register("d")
	fourth := byID(registrytest.WaitFor(t, w, "a, b, c and d", registrytest.HasIDs("a", "b", "c", "d")))
	if fourth["a"] != first["a"] {
		t.Fatalf("an unchanged rewrite of a replaced it: %p → %p", first["a"], fourth["a"])
	}
}
