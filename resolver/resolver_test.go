package resolver_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/resolvertest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

func TestRoundRobinFollowsTheRegistry(t *testing.T) {
	e := newEnv(t)
	a, b, c := e.serve(t, "a", "v1", "z1"), e.serve(t, "b", "v1", "z1"), e.serve(t, "c", "v1", "z1")
	conn := dial(t, grpc.WithResolvers(e.b), "muster:///greeter")
	callUntil(t, conn, "every server called", hasAll(a.Addr, b.Addr, c.Addr))

	if err := e.reg.Deregister(ctxFor(t, 5*time.Second), "greeter", "b"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the requirement: no call reaches b one second after it left
	b.ResetCalls()
	got := calls(t, conn, 100)
	if b.Calls() != 0 {
		t.Fatalf("deregistered backend got %d of 100 calls 1s after it left: %v", b.Calls(), got)
	}

	d := e.serve(t, "d", "v1", "z1")
	callUntil(t, conn, "the new server called", hasAll(d.Addr))
}

func TestCallsSucceedWhileEtcdIsDown(t *testing.T) {
	e := newEnv(t)
	a, b, c := e.serve(t, "a", "v1", "z1"), e.serve(t, "b", "v1", "z1"), e.serve(t, "c", "v1", "z1")
	conn := dial(t, grpc.WithResolvers(e.b), "muster:///greeter")
	callUntil(t, conn, "every server called", hasAll(a.Addr, b.Addr, c.Addr))

	m := e.c.Members()[0]
	m.Stop(t)
	got := calls(t, conn, 1000)
	if len(got) != 3 {
		t.Fatalf("1000 calls with etcd down reached %v, want all 3 servers", got)
	}
	m.Restart(t)
	d := e.serve(t, "d", "v1", "z1")
	callUntil(t, conn, "a server registered after etcd came back called", hasAll(d.Addr))
}

func TestChannelBuiltWhileEtcdIsDownFailsFastThenRecovers(t *testing.T) {
	e := newEnv(t)
	a := e.serve(t, "a", "v1", "z1")
	m := e.c.Members()[0]
	m.Stop(t)

	conn := dial(t, grpc.WithResolvers(e.b), "muster:///greeter")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := testbackend.Call(ctx, conn)
	cancel()
	took := time.Since(start)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("fail-fast call with etcd down and nothing known = %v, want Unavailable", err)
	}
	if took > time.Second {
		t.Fatalf("fail-fast call took %v to fail, want under 1s", took)
	}
	t.Logf("failed fast in %v: %v", took.Round(time.Millisecond), err)

	m.Restart(t)
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := testbackend.Call(ctx, conn, grpc.WaitForReady(true))
	if err != nil || addr != a.Addr {
		t.Fatalf("wait-for-ready call on the same channel after etcd came back = %q, %v; want %s", addr, err, a.Addr)
	}
}

func TestChannelBuiltWhileEtcdIsDownStartsFromDiskSnapshot(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, resolver.WithSnapshotDir(dir))
	a, b := e.serve(t, "a", "v1", "z1"), e.serve(t, "b", "v1", "z1")
	first := dial(t, grpc.WithResolvers(e.b), "muster:///greeter")
	callUntil(t, first, "both servers called", hasAll(a.Addr, b.Addr))
	_ = first.Close()

	e.c.Members()[0].Stop(t)
	// A new process: its own Discovery and Builder, the same snapshot
	// directory, etcd unreachable.
	disc, err := etcd.NewDiscovery(e.cli, etcdopts.Discovery()...)
	if err != nil {
		t.Fatal(err)
	}
	defer disc.Close()
	b2 := resolver.NewBuilder(disc, resolver.WithSnapshotDir(dir), resolver.WithLogger(quiet))
	conn := dial(t, grpc.WithResolvers(b2), "muster:///greeter")
	start := time.Now()
	got := calls(t, conn, 20)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("20 calls from the disk snapshot took %v", took)
	}
	// The first calls may all go to the server whose connection was
	// ready first; with etcd down, only the snapshot can name the other.
	if len(got) != 2 {
		got = callUntil(t, conn, "both servers called from the disk snapshot", hasAll(a.Addr, b.Addr))
	}
	t.Logf("calls from the disk snapshot reached %v", got)
}

func TestCorruptSnapshotIsIgnored(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"greeter.json": "{not json",
	} {
		if err := writeFile(dir, name, content); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnv(t, resolver.WithSnapshotDir(dir))
	e.c.Members()[0].Stop(t)
	conn := dial(t, grpc.WithResolvers(e.b), "muster:///greeter")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := testbackend.Call(ctx, conn); status.Code(err) != codes.Unavailable {
		t.Fatalf("call with a corrupt snapshot and etcd down = %v, want Unavailable (snapshot ignored)", err)
	}
}

// A mass expiry: every server still runs but none can reach etcd (their
// registrars' client is closed), so none can renew its lease or
// re-register, and all their keys expire after the TTL. The channel keeps
// a list of at least half the servers and calls go on; when the servers
// reach etcd again (new clients) they re-register and all are called.
func TestMassExpiryKeepsTheListAndHeals(t *testing.T) {
	e := newEnv(t)
	sink := newLogSink()
	bld := resolver.NewBuilder(e.disc, resolver.WithLogger(sink.logger())) // default protection: 0.5 over 30s
	ids := []string{"a", "b", "c"}
	var backends []*testbackend.Backend
	var addrs []string
	var clients []*clientv3.Client
	// One registrar per server, as in real deployments: three leases.
	for _, id := range ids {
		reg, cli := e.cutOffRegistrar(t)
		be := testbackend.Start(t)
		if err := reg.Register(ctxFor(t, 5*time.Second), registry.Instance{Name: "greeter", ID: id, Addr: be.Addr}); err != nil {
			t.Fatal(err)
		}
		backends, addrs, clients = append(backends, be), append(addrs, be.Addr), append(clients, cli)
	}
	states := newStateLog()
	conn := dial(t, grpc.WithResolvers(states.builder(bld)), "muster:///greeter")
	callUntil(t, conn, "every server called", hasAll(addrs...))

	w, err := e.disc.Watch(ctxFor(t, 30*time.Second), "greeter")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, cli := range clients {
		_ = cli.Close()
	}
	// Every key expires (TTL 2s): the registry holds no instance.
	for deadline := time.After(10 * time.Second); len(w.Snapshot().Instances) != 0; {
		select {
		case <-w.Updates():
		case <-deadline:
			t.Fatalf("the leases of servers cut off from etcd did not expire within 10s: %d instances left", len(w.Snapshot().Instances))
		}
	}
	// The last update, to an empty list, is withheld whatever came before
	// (2 of 3 may be served; 1 or 0 are below half).
	sink.wait(t, msgProtected, 5*time.Second)
	got := calls(t, conn, 300)
	if len(got) < 2 {
		t.Fatalf("calls during the mass expiry reached %v, want at least 2 of the 3 servers", got)
	}
	if bld.Stats().Protected == 0 {
		t.Fatalf("no update was withheld by protection; stats %+v", bld.Stats())
	}
	for _, s := range states.since(0) {
		if len(s.addrs) < 2 {
			t.Fatalf("the channel got a state of %d endpoints during the mass expiry; states %s", len(s.addrs), states.describe(0))
		}
	}

	// The servers reach etcd again and re-register.
	healStart := time.Now()
	for i, id := range ids {
		reg, _ := e.cutOffRegistrar(t)
		if err := reg.Register(ctxFor(t, 5*time.Second), registry.Instance{Name: "greeter", ID: id, Addr: backends[i].Addr}); err != nil {
			t.Fatal(err)
		}
	}
	sink.wait(t, msgLifted, 10*time.Second)
	for _, be := range backends {
		be.ResetCalls()
	}
	callUntil(t, conn, "every server called after re-registration", hasAll(addrs...))
	t.Logf("during the expiry: 300 calls, 0 failed, reached %d servers; %d updates withheld; healed (all called) %v after the servers reached etcd again",
		len(got), bld.Stats().Protected, time.Since(healStart).Round(time.Millisecond))
}

func TestFiltersByVersionZoneAndMetadata(t *testing.T) {
	e := newEnv(t)
	a := e.serve(t, "a", "v1", "z1")
	b := e.serve(t, "b", "v1", "z2")
	c := e.serve(t, "c", "v2", "z1")
	blue := testbackend.Start(t)
	if err := e.reg.Register(ctxFor(t, 5*time.Second), registry.Instance{
		Name: "greeter", ID: "blue", Addr: blue.Addr, Version: "v3", Zone: "z3", Metadata: map[string]string{"color": "blue"},
	}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		target string
		opts   []resolver.Option
		want   []*testbackend.Backend
	}{
		{"muster:///greeter?version=v1", nil, []*testbackend.Backend{a, b}},
		// With the fallback (the default) a zone hands every instance,
		// with the locality for the balancer (TestStatesCarryTheLocality).
		{"muster:///greeter?zone=z1", nil, []*testbackend.Backend{a, b, c, blue}},
		{"muster:///greeter?version=v2&zone=z2", nil, []*testbackend.Backend{c}},
		{"muster:///greeter?meta.color=blue", nil, []*testbackend.Backend{blue}},
		// Without it, only the zone's.
		{"muster:///greeter?zone=z1", []resolver.Option{resolver.WithZoneFallback(false)}, []*testbackend.Backend{a, c}},
		{"muster:///greeter", []resolver.Option{resolver.WithZone("z2"), resolver.WithZoneFallback(false)}, []*testbackend.Backend{b}},
		{"muster:///greeter?zone=z3", []resolver.Option{resolver.WithZone("z2"), resolver.WithZoneFallback(false)}, []*testbackend.Backend{blue}},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			bld := resolver.NewBuilder(e.disc, append([]resolver.Option{resolver.WithLogger(quiet)}, tc.opts...)...)
			conn := dial(t, grpc.WithResolvers(bld), tc.target)
			var addrs []string
			for _, be := range tc.want {
				addrs = append(addrs, be.Addr)
			}
			callUntil(t, conn, "every expected server called", hasAll(addrs...))
			got := calls(t, conn, 40)
			for addr := range got {
				if !contains(addrs, addr) {
					t.Fatalf("%s reached %s, which the filter excludes; calls %v", tc.target, addr, got)
				}
			}
		})
	}
	t.Run("no fallback", func(t *testing.T) {
		bld := resolver.NewBuilder(e.disc, resolver.WithZoneFallback(false), resolver.WithLogger(quiet))
		conn := dial(t, grpc.WithResolvers(bld), "muster:///greeter?zone=z9")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := testbackend.Call(ctx, conn); status.Code(err) != codes.Unavailable {
			t.Fatalf("call with no instance in the zone and no fallback = %v, want Unavailable", err)
		}
	})
}

func TestBadTargetsAndSchemeRegistration(t *testing.T) {
	e := newEnv(t)
	bad := []string{
		"muster:///",
		"muster://greeter",
		"muster:///Greeter",
		"muster:///greeter?color=blue",
		"muster:///greeter?zone=",
		"muster:///greeter?zone=a&zone=b",
		"muster:///greeter/extra",
		"muster:///greeter?lb=nope",
	}
	for _, target := range bad {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.b.Build(grpcresolver.Target{URL: *u}, nil, grpcresolver.BuildOptions{})
		if !errors.Is(err, resolver.ErrBadTarget) {
			if r != nil {
				r.Close()
			}
			t.Errorf("Build(%s) = %v, want ErrBadTarget", target, err)
			continue
		}
		t.Logf("%s: %v", target, err)
	}

	// gRPC's registry is global and has no Unregister: a scheme of its own
	// per run keeps -count=N working.
	scheme := fmt.Sprintf("muster-dup-test-%d", time.Now().UnixNano())
	if err := resolver.Register(resolver.NewBuilder(e.disc, resolver.WithScheme(scheme))); err != nil {
		t.Fatalf("first Register: %v", err)
	}
	err := resolver.Register(resolver.NewBuilder(e.disc, resolver.WithScheme(scheme)))
	if !errors.Is(err, resolver.ErrSchemeRegistered) {
		t.Fatalf("second Register of a scheme = %v, want ErrSchemeRegistered", err)
	}
	if err := resolver.Register(resolver.NewBuilder(e.disc, resolver.WithScheme("dns"))); !errors.Is(err, resolver.ErrSchemeRegistered) {
		t.Fatalf("Register over gRPC's dns resolver = %v, want ErrSchemeRegistered", err)
	}
}

func TestIdleChannelWakesOnTheSharedWatch(t *testing.T) {
	c := newEnv(t)
	disc, err := etcd.NewDiscovery(c.cli, etcdopts.Discovery(etcd.WithLinger(time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	defer disc.Close()
	a := c.serve(t, "a", "v1", "z1")
	bld := resolver.NewBuilder(disc, resolver.WithLogger(quiet))
	conn := dial(t, grpc.WithResolvers(bld), "muster:///greeter", grpc.WithIdleTimeout(100*time.Millisecond))
	callUntil(t, conn, "the server called", hasAll(a.Addr))
	loads := disc.Stats().Loads
	// Wait for the channel to enter idle mode: its resolver is closed.
	for deadline := time.Now().Add(10 * time.Second); disc.Stats().Watchers != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("channel never went idle; stats %+v", disc.Stats())
		}
		time.Sleep(20 * time.Millisecond) // polling the channel's idleness
	}
	got := calls(t, conn, 10)
	if got[a.Addr] != 10 {
		t.Fatalf("calls after waking from idle: %v", got)
	}
	if st := disc.Stats(); st.Loads != loads {
		t.Fatalf("waking from idle loaded the service again: loads %d -> %d", loads, st.Loads)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestOneUpdatePerWatchBatch(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var sizes []int
	got5 := make(chan struct{})
	rec := resolvertest.RecordingBuilder{Builder: e.b, OnUpdate: func(n int, _ time.Time) {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, n)
		if n == 5 {
			close(got5)
		}
	}}
	conn := dial(t, grpc.WithResolvers(rec), "muster:///greeter")
	conn.Connect()
	var ops []clientv3.Op
	for i := 0; i < 5; i++ {
		v, err := registry.Marshal(registry.Instance{Name: "greeter", ID: fmt.Sprint(i), Addr: fmt.Sprintf("127.0.0.1:%d", 1+i)})
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(registry.Key(registry.DefaultPrefix, "greeter", fmt.Sprint(i)), string(v)))
	}
	if _, err := e.cli.Txn(ctxFor(t, 5*time.Second)).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got5:
	case <-time.After(10 * time.Second):
		t.Fatalf("no state with 5 endpoints; states seen %v", sizes)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range sizes {
		if n > 0 && n < 5 {
			t.Fatalf("a batch of 5 registrations reached the channel in parts: states %v", sizes)
		}
	}
}

func TestSubsetLimitsAChannelsBackends(t *testing.T) {
	e := newEnv(t)
	byAddr := map[string]string{}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		byAddr[e.serve(t, id, "v1", "z1").Addr] = id
	}
	bld := resolver.NewBuilder(e.disc, resolver.WithSubset(2), resolver.WithClientID("client-1"), resolver.WithLogger(quiet))
	conn := dial(t, grpc.WithResolvers(bld), "muster:///greeter")
	callUntil(t, conn, "two servers called", func(c map[string]int) bool { return len(c) >= 2 })
	got := calls(t, conn, 100)
	if len(got) != 2 {
		t.Fatalf("a subset of 2 reached %d servers: %v", len(got), got)
	}
	var leave string
	for addr := range got {
		leave = byAddr[addr]
		break
	}
	if err := e.reg.Deregister(ctxFor(t, 5*time.Second), "greeter", leave); err != nil {
		t.Fatal(err)
	}
	callUntil(t, conn, "a replacement server called", func(c map[string]int) bool {
		for addr := range c {
			if _, old := got[addr]; !old {
				return true
			}
		}
		return false
	})
	// The replacement arrived in the same state that removed the departed
	// server, so from here on only the new pair is called.
	after := calls(t, conn, 100)
	if len(after) != 2 {
		t.Fatalf("after a member left, the subset reached %v, want 2 servers", after)
	}
	for addr := range after {
		if byAddr[addr] == leave {
			t.Fatalf("the departed server %s is still called", leave)
		}
	}
}

// A service with no instance (etcd up) gives the channel an empty state at
// once, so fail-fast calls fail with Unavailable instead of waiting for a
// resolver that stays silent; ResolveNow, called by gRPC on every such
// failure, starts nothing.
func TestEmptyServiceFailsFast(t *testing.T) {
	e := newEnv(t)
	seen := registrytest.NewArrivals()
	bld := resolvertest.RecordingBuilder{Builder: e.b, OnUpdate: seen.Mark}
	conn := dial(t, grpc.WithResolvers(bld), "muster:///nobody")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := testbackend.Call(ctx, conn)
	cancel()
	if took := time.Since(start); status.Code(err) != codes.Unavailable || took > time.Second {
		t.Fatalf("fail-fast call to a service with no instance = %v after %v, want Unavailable within 1s", err, took)
	}
	seen.Wait(t, 0) // the empty state was delivered

	r, err := e.b.Build(grpcresolver.Target{URL: url.URL{Scheme: "muster", Path: "/nobody"}}, nopCC{}, grpcresolver.BuildOptions{DisableServiceConfig: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	before := runtime.NumGoroutine()
	for i := 0; i < 10000; i++ {
		r.ResolveNow(grpcresolver.ResolveNowOptions{})
	}
	// The slack is for the goroutines the test's channel and etcd client
	// start meanwhile (+3 seen under -race and load); a goroutine per
	// call would add thousands.
	if after := runtime.NumGoroutine(); after > before+20 {
		t.Fatalf("10,000 ResolveNow calls: goroutines %d -> %d", before, after)
	}
}

// nopCC is a resolver ClientConn that drops everything.
type nopCC struct{ grpcresolver.ClientConn }

func (nopCC) UpdateState(grpcresolver.State) error { return nil }
func (nopCC) ReportError(error)                    {}

// A channel over a Discovery that cannot watch its service (here a closed
// one) fails to build, saying so, instead of waiting for a list that never
// comes.
func TestBuildFailsWhenTheServiceCannotBeWatched(t *testing.T) {
	e := newEnv(t)
	if err := e.disc.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := e.b.Build(grpcresolver.Target{URL: url.URL{Scheme: "muster", Path: "/greeter"}}, nil, grpcresolver.BuildOptions{})
	if err == nil {
		r.Close()
		t.Fatal("Build over a closed Discovery succeeded, want an error")
	}
	if !strings.HasPrefix(err.Error(), "resolver: watch greeter: ") || !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Build over a closed Discovery: %v, want \"resolver: watch greeter: ...\" matching registry.ErrClosed", err)
	}
}
