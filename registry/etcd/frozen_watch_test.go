package etcd_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// frozenBound is the bound docs/RELIABILITY.md states, with the default
// options, from the moment the member carrying a Discovery's watch stops
// answering to a change made through another member being in the snapshot:
// silence noticed after 2.5 progress intervals (5 s), then at most one Get
// and one watch creation given up on the stalled member (1 s and 2 s), with
// backoff between.
const frozenBound = 10 * time.Second

// TestWatchMovesOffAFrozenMember freezes (SIGSTOP) the member whose ID is
// in the Discovery's watch headers (its TCP connections stay up and
// nothing answers; if it led, the others elect a leader), makes a change through
// the other members, and requires it in the snapshot within frozenBound of
// the freeze, with the default options. The Discovery's client has all
// three endpoints, so its balancer may place the reload and the new watch
// on the frozen member again; the Discovery must move on quickly.
func TestWatchMovesOffAFrozenMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithSize(3), etcdtest.WithProcesses())
	cli := c.Client(t) // all three members, through their proxies
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("discovery log:\n%s", logs.String())
		}
	})
	d := newDiscovery(t, cli, etcd.WithPrefix("/p"), etcd.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	ctx := ctxFor(t, 60*time.Second)

	putInstance(t, c.Client(t, c.DirectEndpoints()...), "/p", instance("svc", "a", 9000))
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	// Other requests on the same client, as a process that registers
	// and discovers through one client makes: the balancer's round robin
	// over the members is then not in step with the Discovery's own
	// requests, so its reload and its new watch can land on any member,
	// the frozen one included.
	bg, stopBG := context.WithCancel(context.Background())
	bgDone := make(chan struct{})
	go func() {
		defer close(bgDone)
		for bg.Err() == nil {
			// At irregular times, as real traffic comes.
			ctx, cancel := context.WithTimeout(bg, time.Duration(20+rand.IntN(130))*time.Millisecond)
			_, _ = cli.Get(ctx, "/other", clientv3.WithSerializable())
			<-ctx.Done()
			cancel()
		}
	}()
	defer func() { stopBG(); <-bgDone }()

	// Two rounds: each freezes the member the watch is on at that time.
	for round := range 2 {
		first, second := fmt.Sprintf("r%d-1", round), fmt.Sprintf("r%d-2", round)
		frozen := watchMember(t, c, d, "svc", nil)
		leader := c.Members()[c.WaitLeader(t)]
		frozen.Freeze(t)
		start := time.Now()
		// Through the other members. A proposal a follower forwarded to
		// a frozen leader is lost, so the write is retried until the
		// others have elected a leader.
		writer := writerAvoiding(t, c, frozen)
		putRetrying(t, writer, "/p", instance("svc", first, 9001), frozenBound)
		put := time.Since(start)
		registrytest.WaitForWithin(t, w, frozenBound-time.Since(start),
			first+", written through another member while "+frozen.Name()+" is frozen", hasID(first))
		seen := time.Since(start)
		// The watch must be open again, elsewhere: a second change
		// arrives through it.
		moved := watchMember(t, c, d, "svc", frozen)
		t.Logf("round %d: watch moved to %s after %v", round+1, moved.Name(), time.Since(start).Round(time.Millisecond))
		putRetrying(t, writer, "/p", instance("svc", second, 9002), frozenBound)
		registrytest.WaitForWithin(t, w, max(frozenBound-time.Since(start), 0),
			second+", written after the watch moved to "+moved.Name(), hasID(second))
		st := d.Stats()
		t.Logf("round %d: %s froze (leader: %v); first change written after %v, seen after %v; watch moved to %s, second change seen after %v; silence reloads %d, resyncs %d, loads %d",
			round+1, frozen.Name(), frozen == leader, put.Round(time.Millisecond), seen.Round(time.Millisecond),
			moved.Name(), time.Since(start).Round(time.Millisecond), st.SilenceReloads, st.Resyncs, st.Loads)
		frozen.Thaw(t)
		// A thawed member catches up before the next round, which may
		// need it for a quorum.
		waitServes(t, c, frozen)
	}
}

// waitServes waits until m serves a linearizable read, within 15s.
func waitServes(t *testing.T, c *etcdtest.Cluster, m *etcdtest.Member) {
	t.Helper()
	cli := c.Client(t, m.DirectEndpoint())
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "/probe")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not serve 15s after it was thawed: %v", m.Name(), err)
		}
	}
}

func hasID(id string) func(registry.Snapshot) bool {
	return func(s registry.Snapshot) bool { return slices.Contains(registrytest.IDs(s), id) }
}

// putRetrying writes an instance with attempts of one second until one
// succeeds, for at most bound.
func putRetrying(t *testing.T, cli *clientv3.Client, prefix string, in registry.Instance, bound time.Duration) {
	t.Helper()
	v, err := registry.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Put(ctx, registry.Key(prefix, in.Name, in.ID), string(v))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("put %s: no attempt succeeded within %v: %v", in.ID, bound, err)
		}
	}
}

// writerAvoiding returns a client of every member but m, directly.
func writerAvoiding(t *testing.T, c *etcdtest.Cluster, m *etcdtest.Member) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, o := range c.Members() {
		if o != m {
			eps = append(eps, o.DirectEndpoint())
		}
	}
	return c.Client(t, eps...)
}

// watchMember returns the member whose ID is in the last header of the
// Discovery's watch of service, other than not. The ID is known once the
// watch is confirmed (it is 0 between watches), which has no event to
// wait on: it is polled, within frozenBound.
func watchMember(t *testing.T, c *etcdtest.Cluster, d *etcd.Discovery, service string, not *etcdtest.Member) *etcdtest.Member {
	t.Helper()
	deadline := time.Now().Add(frozenBound)
	for {
		for _, s := range d.Stats().PerService {
			if s.Name != service || s.WatchMember == 0 {
				continue
			}
			m := c.MemberByID(s.WatchMember)
			if m == nil {
				t.Fatalf("the watch of %s is on member %x, which is not in the cluster", service, s.WatchMember)
			}
			if m != not {
				return m
			}
		}
		if time.Now().After(deadline) {
			other := "any member"
			if not != nil {
				other = "a member other than " + not.Name()
			}
			t.Fatalf("the watch of %s was not confirmed on %s within %v", service, other, frozenBound)
		}
		time.Sleep(10 * time.Millisecond) // no event to await
	}
}
