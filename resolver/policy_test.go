package resolver_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// With WithPolicies and WithPolicyServiceConfig a native channel applies
// the service's call policy, set live: a retry on UNAVAILABLE turns the
// calls that reach a failing backend into successes (round robin sends
// every other call there); a timeout ends a slow call with
// DEADLINE_EXCEEDED within the policy's time + 20 %; cleared, the timeout
// is gone (the resolver hands the service config without it).
func TestPolicyServiceConfig(t *testing.T) {
	e := newEnv(t)
	bad, good := e.serve(t, "bad", "v1", ""), e.serve(t, "good", "v1", "")
	ps, err := etcd.NewPolicies(e.cli, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	b := resolver.NewBuilder(e.disc, resolver.WithLogger(quiet), resolver.WithPolicies(ps),
		resolver.WithPolicyServiceConfig(`[{"round_robin":{}}]`))
	conn := dialWith(t, "muster:///greeter", grpc.WithResolvers(b))
	callUntil(t, conn, "both backends called", hasAll(bad.Addr, good.Addr))
	bad.SetFailing(true)
	failures := func(n int) (failed int, last error) {
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := testbackend.Call(ctx, conn); err != nil {
				failed++
				last = err
			}
			cancel()
		}
		return failed, last
	}
	if failed, _ := failures(20); failed == 0 {
		t.Fatal("no call failed with one of two backends failing and no policy")
	}
	set := func(p registry.Policy) {
		t.Helper()
		if err := etcd.SetPolicy(ctxFor(t, 10*time.Second), e.cli, "greeter", p, etcdopts.Write()...); err != nil {
			t.Fatal(err)
		}
	}
	set(registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"},
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		failed, last := failures(20)
		if failed == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the retry policy, %d of 20 calls fail: %v", failed, last)
		}
	}
	if failed, last := failures(200); failed != 0 {
		t.Fatalf("with retries %d of 200 calls failed: %v", failed, last)
	}

	bad.SetFailing(false)
	bad.SetDelay(3 * time.Second)
	good.SetDelay(3 * time.Second)
	set(registry.Policy{Timeout: 300 * time.Millisecond})
	deadline = time.Now().Add(15 * time.Second)
	for {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := testbackend.Call(ctx, conn)
		cancel()
		took := time.Since(t0)
		if status.Code(err) == codes.DeadlineExceeded && took < 360*time.Millisecond {
			t.Logf("policy timeout 300 ms: DEADLINE_EXCEEDED after %v", took.Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the timeout policy a call ended with %v after %v; want DEADLINE_EXCEEDED within 360ms", err, took)
		}
	}
	bad.SetDelay(0)
	good.SetDelay(0)
	if err := etcd.ClearPolicy(ctxFor(t, 10*time.Second), e.cli, "greeter", etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	bad.SetDelay(500 * time.Millisecond)
	good.SetDelay(500 * time.Millisecond)
	deadline = time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := testbackend.Call(ctx, conn)
		cancel()
		if err == nil {
			break // a 500 ms call succeeds: the 300 ms timeout is gone
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the policy was cleared, calls still fail: %v", err)
		}
	}
}
