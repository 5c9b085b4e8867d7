package balancersuite

import (
	"context"
	"fmt"
	"github.com/musterhq/muster/internal/testkit/balancertest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// CircuitBreaking checks the call policy's maxConcurrent in policy over
// real backends and real etcd, the policy written as an operator would
// (etcd.SetPolicy) and followed by the resolver (resolver.WithPolicies):
// with a cap of 2 and backends that answer after 1 s, of 6 calls at once 4
// fail at once with Unavailable naming the limit; raised live to 10, all 6
// succeed; cleared, no cap.
func CircuitBreaking(t *testing.T, policy string) {
	reg, bs, ps := policyFleet(t, 2)
	for _, b := range bs {
		b.SetDelay(time.Second)
	}
	conn := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(policy, "", false), grpc.WithResolvers(reg.BuilderWith(resolver.WithPolicies(ps))))
	set := func(p registry.Policy) {
		t.Helper()
		setPolicy(t, reg, p)
	}
	// burst makes 6 calls at once and returns how many failed fast
	// (within 500 ms) with Unavailable, and how many succeeded.
	burst := func() (fast, ok int, msg string) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := testbackend.Call(ctx, conn)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case status.Code(err) == codes.Unavailable && time.Since(t0) < 500*time.Millisecond:
					fast++
					msg = status.Convert(err).Message()
				}
			}()
		}
		wg.Wait()
		return fast, ok, msg
	}
	until := func(what string, cond func(fast, ok int, msg string) bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			fast, ok, msg := burst()
			if cond(fast, ok, msg) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 15s, not %s: %d failed fast, %d succeeded (%s)", what, fast, ok, msg)
			}
		}
	}
	balancertest.CallUntil(t, conn, 10*time.Second, "a first call", func(r balancertest.Result) bool { return r.OK > 0 })
	until("6 calls at once all succeeding without a policy", func(_, ok int, _ string) bool { return ok == 6 })
	set(registry.Policy{MaxConcurrent: 2})
	until("4 of 6 calls at once failing fast under a cap of 2", func(fast, ok int, msg string) bool {
		return fast == 4 && ok == 2 && strings.Contains(msg, "maxConcurrent") && strings.Contains(msg, "at most 2")
	})
	set(registry.Policy{MaxConcurrent: 10})
	until("6 calls at once all succeeding under a cap of 10", func(_, ok int, _ string) bool { return ok == 6 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := etcd.ClearPolicy(ctx, reg.Client, "greeter"); err != nil {
		t.Fatal(err)
	}
	set(registry.Policy{MaxConcurrent: 1})
	until("5 of 6 failing fast under a cap of 1", func(fast, _ int, _ string) bool { return fast == 5 })
}

// CanaryKeyHeader checks that a call policy's affinityHeader keys the
// canary's share: with a 50 % canary and affinityHeader x-user, each of 40
// users (calls carrying x-user, not color.WithKey) gets all its 10 calls
// on one version, and the users split between the two.
func CanaryKeyHeader(t *testing.T, policy string) {
	f := startFleet(t)
	canaries, err := etcd.NewCanaries(f.reg.Client)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := etcd.NewPolicies(f.reg.Client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := etcd.SetPolicy(ctx, f.reg.Client, "greeter", registry.Policy{AffinityHeader: "x-user"}); err != nil {
		t.Fatal(err)
	}
	if err := etcd.SetCanary(ctx, f.reg.Client, "greeter", registry.Canary{Color: "blue", Percent: 50}); err != nil {
		t.Fatal(err)
	}
	b := f.reg.BuilderWith(resolver.WithCanaries(canaries), resolver.WithPolicies(ps))
	conn := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(policy, "", false), grpc.WithResolvers(b))
	balancertest.CallUntil(t, conn, 10*time.Second, "uncolored calls on blue under the canary", balancertest.ServedAll(f.blue))
	// The policy is followed apart from the canary: wait until one user's
	// 20 calls land on one version (by chance, without the policy, with
	// probability 2·2⁻²⁰).
	probe := metadata.AppendToOutgoingContext(context.Background(), "x-user", "probe")
	balancertest.CallUntil(t, conn, 10*time.Second, "the affinity header in force", func(balancertest.Result) bool {
		got := balancertest.CallsCtx(probe, conn, 20, 1)
		return got.By[f.blue.Addr] == 0 || got.By[f.blue.Addr] == 20
	})
	onBlue, mixed := 0, 0
	for u := range 40 {
		uctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", fmt.Sprint("user-", u))
		got := balancertest.CallsCtx(uctx, conn, 10, 1)
		switch n := got.By[f.blue.Addr]; {
		case got.Failed != 0:
			t.Fatalf("user-%d: %v", u, got)
		case n == 10:
			onBlue++
		case n != 0:
			mixed++
		}
	}
	t.Logf("%s: of 40 users, %d on blue, %d split", policy, onBlue, mixed)
	if mixed != 0 || onBlue == 0 || onBlue == 40 {
		t.Fatalf("%s: %d of 40 users split between versions, %d on blue; want none split, some on each", policy, mixed, onBlue)
	}
}

// PolicyOutlierEjection checks the call policy's ejection by failure
// percentage over real backends and real etcd, with config, the
// balancer config, turning the balancer's own ejection (consecutive
// failures) off so that only the policy ejects: of two backends, one
// failing every call from some moment gets at most 2 % of the calls made
// from 3 s after it, and no more than the probes at the end of its
// ejections (the policy's window is 1 s, its base ejection 2 s: at most
// two ejections end in the 2 s measured); once healthy it is back after
// its ejection time. A balancer that steers away from failures by itself
// (muster_p2c's cost) gives a failing backend few calls, so the policy
// judges on 2 calls a window, and the balancer is configured to come back
// to failing backends soon (a short decayTime); else the failing backend
// gets too few calls to be judged.
func PolicyOutlierEjection(t *testing.T, policy, config string) {
	reg, bs, ps := policyFleet(t, 2)
	good, bad := bs[0], bs[1]
	const base = 2 * time.Second
	setPolicy(t, reg, registry.Policy{Outlier: registry.OutlierPolicy{
		FailurePercent: 50, MinRequests: 2, BaseEjection: base,
	}})
	conn := balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(policy, config, false),
		grpc.WithResolvers(reg.BuilderWith(resolver.WithPolicies(ps))))
	balancertest.CallUntil(t, conn, 10*time.Second, "both backends called", balancertest.ServedAll(bs...))

	bad.SetFailing(true)
	warm := balancertest.CallsFor(conn, 3*time.Second, 2)
	bad.ResetCalls()
	got := balancertest.CallsFor(conn, 2*time.Second, 2)
	total := got.OK + got.Failed
	share := float64(bad.Calls()) / float64(max(total, 1))
	t.Logf("%s: first 3 s %v; then %d calls, %d to the failing backend (%.2f%%)", policy, warm, total, bad.Calls(), 100*share)
	if total < 100 || share > 0.02 || bad.Calls() > 2 {
		t.Fatalf("from 3 s after it failed, the failing backend got %d of %d calls (%.2f%%); want at least 100 calls, at most 2%% and 2 probes",
			bad.Calls(), total, 100*share)
	}

	bad.SetFailing(false)
	healed := time.Now()
	// Ejections in a row grow (base, 2·base, ...): the third ends at most
	// 6·base after the first began.
	balancertest.CallUntil(t, conn, 6*base+5*time.Second, "the healed backend serving again", func(r balancertest.Result) bool {
		return r.By[bad.Addr] > 0 && r.By[good.Addr] > 0
	})
	t.Logf("%s: back %v after it healed", policy, time.Since(healed).Round(time.Millisecond))
}

// PolicyAffinity checks the call policy's affinity over real backends and
// real etcd: with affinityHeader x-user, 100 calls with x-user: alice, 4
// at a time, reach one backend, the same from a second channel; each of
// 20 other users stays on one backend, and the users use more than one.
// Without affinity the calls of one key spread (round robin, or by load
// with 4 in flight).
func PolicyAffinity(t *testing.T, policy string) {
	reg, bs, ps := policyFleet(t, 3)
	setPolicy(t, reg, registry.Policy{AffinityHeader: "x-user"})
	builder := reg.BuilderWith(resolver.WithPolicies(ps))
	conns := []*grpc.ClientConn{
		balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(policy, "", false), grpc.WithResolvers(builder)),
		balancertest.Dial(t, "muster:///greeter", balancertest.ServiceConfig(policy, "", false), grpc.WithResolvers(builder)),
	}
	// one returns the backend all of the user's n calls on conn reached,
	// "" when they spread or failed.
	one := func(conn *grpc.ClientConn, user string, n int) (string, balancertest.Result) {
		uctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", user)
		got := balancertest.CallsCtx(uctx, conn, n, 4)
		for addr, c := range got.By {
			if c == n {
				return addr, got
			}
		}
		return "", got
	}
	for _, conn := range conns {
		balancertest.CallUntil(t, conn, 10*time.Second, "all backends called", balancertest.ServedAll(bs...))
		balancertest.CallUntil(t, conn, 10*time.Second, "the affinity header in force", func(balancertest.Result) bool {
			addr, _ := one(conn, "probe", 20)
			return addr != ""
		})
	}
	alice, got := one(conns[0], "alice", 100)
	if alice == "" {
		t.Fatalf("%s: alice's 100 calls spread: %v", policy, got)
	}
	if again, got := one(conns[1], "alice", 100); again != alice {
		t.Fatalf("%s: alice's calls on %s from one channel, %v from another", policy, alice, got)
	}
	used := map[string]int{}
	for u := range 20 {
		user := fmt.Sprint("user-", u)
		addr, got := one(conns[u%2], user, 10)
		if addr == "" {
			t.Fatalf("%s: %s's 10 calls spread: %v", policy, user, got)
		}
		used[addr]++
	}
	if len(used) < 2 {
		t.Fatalf("%s: 20 users all on one backend (%v); affinity should spread keys", policy, used)
	}
	t.Logf("%s: alice on %s from both channels; 20 users over backends %v", policy, alice, used)
}

// policyFleet starts a registry with n backends of "greeter" registered
// (IDs a, b, ...) and the service policies it follows.
func policyFleet(t *testing.T, n int) (*Registry, []*testbackend.Backend, *etcd.Policies) {
	t.Helper()
	reg := StartRegistry(t)
	bs := balancertest.Backends(t, n)
	for i, b := range bs {
		reg.Register(t, registry.Instance{Name: "greeter", ID: string(rune('a' + i)), Addr: b.Addr})
	}
	ps, err := etcd.NewPolicies(reg.Client)
	if err != nil {
		t.Fatal(err)
	}
	return reg, bs, ps
}

// setPolicy writes the policy of "greeter" as an operator would.
func setPolicy(t *testing.T, reg *Registry, p registry.Policy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := etcd.SetPolicy(ctx, reg.Client, "greeter", p); err != nil {
		t.Fatal(err)
	}
}
