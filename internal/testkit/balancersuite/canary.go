package balancersuite

import (
	"context"
	"fmt"
	"github.com/musterhq/muster/internal/testkit/balancertest"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// Canary checks policy's canary over real backends and real etcd: two
// base backends and a blue one; the canary setting, written to etcd as an
// operator would, reaches the balancer through the resolver.
//
// Share: each uncolored call without a key goes to blue independently with
// probability p, so the blue count of n calls is binomial(n, p). The test
// accepts p·n ± 5σ, σ = √(n·p·(1−p)); a correct balancer fails it with
// probability below 10⁻⁶. The machine's load changes the calls' timing,
// not the draws, so the bound holds on a loaded machine.
func Canary(t *testing.T, policy string) {
	f := startFleet(t)
	reg, blue := f.reg, f.blue
	conn := f.dial(t, policy, "")

	setCanary := func(pct float64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := etcd.SetCanary(ctx, reg.Client, "greeter", registry.Canary{Color: "blue", Percent: pct}); err != nil {
			t.Fatal(err)
		}
	}

	// Live change: 100 % reaches the balancer within 1 s.
	setCanary(100)
	start := time.Now()
	balancertest.CallUntil(t, conn, time.Second, "an uncolored call on blue within 1s of a 100% canary", balancertest.ServedAll(blue))
	t.Logf("canary 100%%: first uncolored call on blue %v after the write", time.Since(start))
	if got := balancertest.Calls(conn, 200, 4); got.By[blue.Addr] != 200 {
		t.Fatalf("200 uncolored calls with a 100%% canary: %v, last error %v", got, got.LastErr)
	}

	// Share at 5 %, counted once the setting is known to be in force: from
	// none (every call on the base) to the first uncolored call on blue.
	clearCanary(t, reg, conn, blue)
	setCanary(5)
	blue.ResetCalls()
	start = time.Now()
	balancertest.CallUntil(t, conn, time.Second, "an uncolored call on blue within 1s of a 5% canary", balancertest.ServedAll(blue))
	t.Logf("canary 5%%: first uncolored call on blue %v after the write", time.Since(start))
	const n, p = 20000, 0.05
	blue.ResetCalls()
	got := balancertest.Calls(conn, n, 8)
	sigma := math.Sqrt(n * p * (1 - p))
	lo, hi := int64(n*p-5*sigma), int64(n*p+5*sigma)
	t.Logf("canary 5%%: blue took %d of %d uncolored calls (%.2f%%; bound %d..%d, ±5σ of binomial(%d, %.2f)): %v",
		blue.Calls(), n, 100*float64(blue.Calls())/n, lo, hi, n, p, got)
	if got.Failed != 0 || blue.Calls() < lo || blue.Calls() > hi {
		t.Fatalf("canary 5%%: blue took %d of %d (want %d..%d), %d failed (%v)", blue.Calls(), n, lo, hi, got.Failed, got.LastErr)
	}

	// Stickiness: each key always lands on the same version.
	const keys, per = 300, 10
	onBlue := 0
	for k := range keys {
		ctx := color.WithKey(context.Background(), fmt.Sprint("user-", k))
		got := balancertest.CallsCtx(ctx, conn, per, 1)
		b := got.By[blue.Addr]
		if got.Failed != 0 || (b != 0 && b != per) {
			t.Fatalf("key user-%d: %v, last error %v; want all %d calls on blue or none", k, got, got.LastErr, per)
		}
		if b == per {
			onBlue++
		}
	}
	t.Logf("canary 5%%: %d of %d keys on blue, each key's %d calls on one version", onBlue, keys, per)
	if onBlue == 0 || onBlue > 45 { // binomial(300, 0.05): mean 15, σ 3.8; P(0) < 10⁻⁶
		t.Fatalf("%d of %d keys on blue, want about 15", onBlue, keys)
	}

	clearCanary(t, reg, conn, blue)
	blue.ResetCalls()
	if got := balancertest.Calls(conn, 2000, 4); blue.Calls() != 0 || got.Failed != 0 {
		t.Fatalf("2000 uncolored calls without a canary: blue took %d, %v", blue.Calls(), got)
	}
}

// clearCanary clears the canary of greeter and waits (at most 1 s) until
// 200 uncolored calls in a row are off blue.
func clearCanary(t *testing.T, reg *Registry, conn *grpc.ClientConn, blue *testbackend.Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := etcd.ClearCanary(ctx, reg.Client, "greeter"); err != nil {
		t.Fatal(err)
	}
	// The promise is the time the clear takes to reach the balancer (the
	// last call blue takes), not how fast a loaded machine makes 200 calls.
	cleared := time.Now()
	lastBlue := cleared
	balancertest.CallUntil(t, conn, 10*time.Second, "200 uncolored calls in a row off blue after clearing the canary",
		balancertest.NotServedLastSince(blue, 200, &lastBlue))
	if d := lastBlue.Sub(cleared); d > time.Second {
		t.Fatalf("blue still took an uncolored call %v after the canary was cleared, want none after 1s", d)
	}
}
