package xds_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// newPolicyEnv is an env whose control plane follows call policies.
func newPolicyEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, xds.WithServices("greeter"))
	e.stopCP()
	ps, err := etcd.NewPolicies(e.cli, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	e.startControlPlane(t, xds.WithServices("greeter"), xds.WithPolicies(ps))
	return e
}

func (e *env) setPolicy(t *testing.T, p registry.Policy) {
	t.Helper()
	if err := etcd.SetPolicy(ctxFor(t, 10*time.Second), e.cli, "greeter", p, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
}

// A grpc-go xDS client applies the service's call policy as the control
// plane publishes it, and follows its changes without a restart: a retry
// on UNAVAILABLE turns the calls that reach a failing backend into
// successes; a timeout ends a slow call with DEADLINE_EXCEEDED within the
// policy's time + 20 %; the cap on calls in flight fails the excess at
// once.
func TestCallPolicyGoClient(t *testing.T) {
	e := newPolicyEnv(t)
	bad, good := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "bad", bad.Addr, "", 0, false)
	e.register(t, "greeter", "good", good.Addr, "", 0, false)
	conn := e.dial(t, "greeter", "policy", "")
	callUntil(t, conn, "calling both backends", func(m map[string]int) bool { return m[bad.Addr] > 0 && m[good.Addr] > 0 })
	bad.SetFailing(true)

	var lastErr error
	count := func(n int) (ok, failed int) {
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := testbackend.Call(ctx, conn); err == nil {
				ok++
			} else {
				failed++
				lastErr = err
			}
			cancel()
		}
		return ok, failed
	}
	if _, failed := count(100); failed == 0 {
		t.Fatalf("without a policy no call to the failing backend failed; the test cannot tell retries")
	}
	// Round robin sends every other first attempt to the failing backend;
	// the retry goes to the other one after a backoff of at most 10 ms.
	e.setPolicy(t, registry.Policy{Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"},
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond}})
	start := time.Now()
	for {
		if _, failed := count(20); failed == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("10s after the retry policy, calls still fail: %v", lastErr)
		}
	}
	t.Logf("retry policy applied within %v of its write (20 calls in a row succeed)", time.Since(start).Round(time.Millisecond))
	if ok, failed := count(400); failed != 0 {
		t.Fatalf("with retries: %d ok, %d failed (%v); want none failed", ok, failed, lastErr)
	}

	// Timeout: the policy's 300 ms ends a call that would take 3 s.
	bad.SetFailing(false)
	bad.SetDelay(3 * time.Second)
	good.SetDelay(3 * time.Second)
	e.setPolicy(t, registry.Policy{Timeout: 300 * time.Millisecond})
	deadline := time.Now().Add(15 * time.Second)
	for {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := testbackend.Call(ctx, conn)
		cancel()
		took := time.Since(t0)
		if status.Code(err) == codes.DeadlineExceeded && took < 360*time.Millisecond {
			t.Logf("timeout 300 ms: DEADLINE_EXCEEDED after %v", took.Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the timeout policy, a call ends with %v after %v; want DEADLINE_EXCEEDED within 360ms", err, took)
		}
	}

	// Cap: 2 calls in flight; of 6 at once, 4 fail at once with UNAVAILABLE.
	e.setPolicy(t, registry.Policy{MaxConcurrent: 2})
	bad.SetDelay(time.Second)
	good.SetDelay(time.Second)
	deadline = time.Now().Add(15 * time.Second)
	for {
		var wg sync.WaitGroup
		var mu sync.Mutex
		fast := 0
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := testbackend.Call(ctx, conn)
				if status.Code(err) == codes.Unavailable && time.Since(t0) < 500*time.Millisecond {
					mu.Lock()
					fast++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if fast == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the cap of 2, %d of 6 concurrent calls failed fast; want 4", fast)
		}
	}
	noNACKs(t, e)
}
