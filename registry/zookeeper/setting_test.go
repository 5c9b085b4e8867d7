package zookeeper_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
	"github.com/musterhq/muster/resolver"
)

// next waits up to 15 s for a value on ch that satisfies ok, failing the
// test naming what with the last value seen otherwise.
func next[T any](t *testing.T, ch <-chan T, what string, ok func(T) bool) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	var last T
	for {
		select {
		case v, open := <-ch:
			if !open {
				t.Fatalf("waiting for %s: the channel closed (last %+v)", what, last)
			}
			if ok(v) {
				return
			}
			last = v
		case <-deadline:
			t.Fatalf("waiting for %s: nothing within 15s; last %+v", what, last)
		}
	}
}

func isPolicy(want registry.Policy) func(registry.Policy) bool {
	return func(p registry.Policy) bool { return reflect.DeepEqual(p, want.Normalize()) }
}

// followers returns a Discovery's canary and policy sources.
func followers(t *testing.T, d *zookeeper.Discovery) (*zookeeper.Canaries, *zookeeper.Policies) {
	t.Helper()
	cs, err := zookeeper.NewCanaries(d)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := zookeeper.NewPolicies(d)
	if err != nil {
		t.Fatal(err)
	}
	return cs, ps
}

// A service's canary and policy, stored in ZooKeeper beside the services,
// reach a follower when first read and after each change; a bad value is
// refused by SetPolicy (naming the field) and changes nothing, one
// written by hand is read as none; the channels close when the context
// ends, or when the Discovery closes.
func TestSettingsFollowed(t *testing.T) {
	c := zktest.Start(t)
	servers := c.Addrs()
	opts := fast(root)
	d := newDiscovery(t, servers, opts...)
	cs, ps := followers(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	canaries := cs.WatchCanary(ctx, "svc")
	policies := ps.WatchPolicy(ctx, "svc")
	next(t, canaries, "no canary at first", func(c registry.Canary) bool { return c == registry.Canary{} })
	next(t, policies, "no policy at first", func(p registry.Policy) bool { return p.IsZero() })

	set := context.Background()
	if err := zookeeper.SetCanary(set, servers, "svc", registry.Canary{Color: "blue", Percent: 10}, opts...); err != nil {
		t.Fatal(err)
	}
	next(t, canaries, "the canary", func(c registry.Canary) bool { return c == registry.Canary{Color: "blue", Percent: 10} })
	if c, ok, err := zookeeper.GetCanary(set, servers, "svc", opts...); err != nil || !ok || c != (registry.Canary{Color: "blue", Percent: 10}) {
		t.Fatalf("GetCanary = %+v, %v, %v", c, ok, err)
	}
	p1 := registry.Policy{Timeout: 800 * time.Millisecond, MaxConcurrent: 10}
	if err := zookeeper.SetPolicy(set, servers, "svc", p1, opts...); err != nil {
		t.Fatal(err)
	}
	next(t, policies, "the policy", isPolicy(p1))
	if got, ok, err := zookeeper.GetPolicy(set, servers, "svc", opts...); err != nil || !ok || !isPolicy(p1)(got) {
		t.Fatalf("GetPolicy = %+v, %v, %v; want %+v", got, ok, err, p1)
	}

	// Refused: a value out of range, the zero Policy, a bad name.
	var fe *registry.FieldError
	if err := zookeeper.SetPolicy(set, servers, "svc", registry.Policy{Timeout: 2 * time.Hour}, opts...); !errors.As(err, &fe) || fe.Field != "timeout" {
		t.Fatalf("SetPolicy(timeout 2h) = %v, want a FieldError naming timeout", err)
	}
	if err := zookeeper.SetPolicy(set, servers, "svc", registry.Policy{}, opts...); err == nil {
		t.Fatal("SetPolicy(zero) = nil, want an error")
	}
	if err := zookeeper.SetCanary(set, servers, "bad/name", registry.Canary{Color: "blue", Percent: 10}, opts...); err == nil {
		t.Fatal("SetCanary(bad/name) = nil, want an error")
	}
	if got, _, _ := zookeeper.GetPolicy(set, servers, "svc", opts...); !isPolicy(p1)(got) {
		t.Fatalf("after refused writes the policy is %+v, want %+v", got, p1)
	}

	// A value written by hand that does not decode reads as no policy.
	raw := rawConn(t, c.DirectAddrs())
	if _, err := raw.Set(registry.PolicyKey(root, "svc"), []byte("not json"), -1); err != nil {
		t.Fatal(err)
	}
	next(t, policies, "no policy for a bad value", func(p registry.Policy) bool { return p.IsZero() })
	if _, _, err := zookeeper.GetPolicy(set, servers, "svc", opts...); !errors.Is(err, registry.ErrMalformedValue) {
		t.Fatalf("GetPolicy of a bad value = %v, want ErrMalformedValue", err)
	}
	p2 := registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"}}}
	if err := zookeeper.SetPolicy(set, servers, "svc", p2, opts...); err != nil {
		t.Fatal(err)
	}
	next(t, policies, "the second policy", isPolicy(p2))

	if err := zookeeper.ClearPolicy(set, servers, "svc", opts...); err != nil {
		t.Fatal(err)
	}
	next(t, policies, "no policy after ClearPolicy", func(p registry.Policy) bool { return p.IsZero() })
	if err := zookeeper.ClearCanary(set, servers, "svc", opts...); err != nil {
		t.Fatal(err)
	}
	next(t, canaries, "no canary after ClearCanary", func(c registry.Canary) bool { return c == registry.Canary{} })
	if _, ok, err := zookeeper.GetPolicy(set, servers, "svc", opts...); ok || err != nil {
		t.Fatalf("GetPolicy after ClearPolicy = %v, %v; want none", ok, err)
	}
	if _, ok, err := zookeeper.GetCanary(set, servers, "svc", opts...); ok || err != nil {
		t.Fatalf("GetCanary after ClearCanary = %v, %v; want none", ok, err)
	}
	if err := zookeeper.ClearPolicy(set, servers, "svc", opts...); err != nil {
		t.Fatalf("ClearPolicy of none = %v, want nil", err)
	}

	cancel()
	for range canaries {
	}
	for range policies {
	}

	// A Discovery's close ends its followers.
	d2, err := zookeeper.NewDiscovery(servers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cs2, _ := followers(t, d2)
	ch := cs2.WatchCanary(context.Background(), "svc")
	next(t, ch, "the first read", func(registry.Canary) bool { return true })
	_ = d2.Close()
	select {
	case _, open := <-ch:
		if open {
			t.Fatal("a value after Close; want the channel closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower's channel is still open 10s after its Discovery closed")
	}
}

// Settings keep reaching a follower through ZooKeeper's faults: a frozen
// server under it (the client moves to another one, its watches set again
// there), and an outage longer than the session (a new session: the
// watches are reported gone and read again).
func TestSettingsFollowThroughFrozenServersAndExpiry(t *testing.T) {
	c := zktest.Start(t, zktest.WithServers(3))
	const timeout = 4 * time.Second
	opts := fast(root, zookeeper.WithSessionTimeout(timeout))
	d := newDiscovery(t, c.Addrs(), opts...)
	_, ps := followers(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	policies := ps.WatchPolicy(ctx, "svc")
	next(t, policies, "no policy at first", func(p registry.Policy) bool { return p.IsZero() })

	// Each server frozen in turn, a new policy written through the others
	// while it is: the follower gets it whichever server it was on.
	for i, srv := range c.Servers() {
		var others []string
		for _, o := range c.Servers() {
			if o != srv {
				others = append(others, o.DirectAddr())
			}
		}
		srv.Freeze(t)
		p := registry.Policy{MaxConcurrent: 10 + i}
		// A write waits for a new leader when the leader is frozen, and
		// for the server thawed last to be back in the ensemble.
		for deadline := time.Now().Add(30 * time.Second); ; {
			err := zookeeper.SetPolicy(context.Background(), others, "svc", p, opts...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				srv.Thaw(t)
				t.Fatalf("no write through the servers not frozen within 30s: %v", err)
			}
		}
		start := time.Now()
		next(t, policies, "the policy written while a server is frozen", isPolicy(p))
		t.Logf("server %d frozen: the policy reached the follower %v after its write", i, time.Since(start).Round(time.Millisecond))
		srv.Thaw(t)
	}

	// Every server cut off from the follower (connections held, nothing
	// answers) for longer than its session: the policy written meanwhile
	// arrives under the new session.
	for _, srv := range c.Servers() {
		srv.Stall()
	}
	p := registry.Policy{MaxConcurrent: 99}
	if err := zookeeper.SetPolicy(context.Background(), c.DirectAddrs(), "svc", p, opts...); err != nil {
		t.Fatal(err)
	}
	// The window: longer than the session, which expires on the servers.
	time.Sleep(2 * timeout)
	for _, srv := range c.Servers() {
		srv.Heal()
	}
	start := time.Now()
	next(t, policies, "the policy written while the session expired", isPolicy(p))
	t.Logf("after the outage: the policy reached the follower %v after the servers answered", time.Since(start).Round(time.Millisecond))
}

// A channel on a ZooKeeper Discovery applies the service's call policy,
// set while it runs: the policy's 300 ms timeout ends a call that would
// take 3 s with DEADLINE_EXCEEDED within 20 % of it; cleared, the call
// takes its 3 s again.
func TestPolicyReachesAChannel(t *testing.T) {
	c := zktest.Start(t)
	servers := c.Addrs()
	opts := fast(root)
	r := newRegistrar(t, servers, opts...)
	d := newDiscovery(t, servers, opts...)
	_, ps := followers(t, d)
	b := testbackend.Start(t)
	b.SetDelay(3 * time.Second)
	register(t, r, registry.Instance{Name: "svc", ID: "a", Addr: b.Addr})
	builder := resolver.NewBuilder(d, resolver.WithLogger(quiet), resolver.WithPolicies(ps),
		resolver.WithPolicyServiceConfig(`[{"round_robin":{}}]`))
	conn, err := grpc.NewClient("muster:///svc", grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := testbackend.Call(ctx, conn, grpc.WaitForReady(true))
		return time.Since(start), err
	}
	if took, err := call(); err != nil || took < 3*time.Second {
		t.Fatalf("without a policy: %v after %v, want a success after 3s", err, took)
	}
	const timeout = 300 * time.Millisecond
	if err := zookeeper.SetPolicy(context.Background(), servers, "svc", registry.Policy{Timeout: timeout}, opts...); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		took, err := call()
		if status.Code(err) == codes.DeadlineExceeded && took <= timeout*12/10 {
			t.Logf("the policy's timeout ended a call after %v", took.Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the policy was set, a call ends with %v after %v; want DEADLINE_EXCEEDED within %v", err, took, timeout*12/10)
		}
	}
	if err := zookeeper.ClearPolicy(context.Background(), servers, "svc", opts...); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		took, err := call()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the policy was cleared, a call ends with %v after %v; want a success", err, took)
		}
	}
}
