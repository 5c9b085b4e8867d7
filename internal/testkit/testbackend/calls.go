package testbackend

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// CallUntil makes calls on conn until cond holds on the per-address counts
// of successful calls, failing the test after within. Failed calls are
// retried every 10ms.
func CallUntil(t testing.TB, conn grpc.ClientConnInterface, within time.Duration, what string, cond func(map[string]int) bool) map[string]int {
	t.Helper()
	counts := map[string]int{}
	deadline := time.Now().Add(within)
	var lastErr error
	for !cond(counts) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v of calls, still not %s: counts %v, last error %v", within, what, counts, lastErr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := Call(ctx, conn)
		cancel()
		if err != nil {
			lastErr = err
			time.Sleep(10 * time.Millisecond) // pacing retries of a failing call
			continue
		}
		counts[addr]++
	}
	return counts
}

// Calls makes n calls on conn and fails the test on the first error. It
// returns the successful calls per address.
func Calls(t testing.TB, conn grpc.ClientConnInterface, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		addr, err := Call(ctx, conn)
		cancel()
		if err != nil {
			t.Fatalf("call %d of %d failed: %v (so far %v)", i+1, n, err, counts)
		}
		counts[addr]++
	}
	return counts
}

// HasAll returns a CallUntil condition: every one of addrs was called.
func HasAll(addrs ...string) func(map[string]int) bool {
	return func(c map[string]int) bool {
		for _, a := range addrs {
			if c[a] == 0 {
				return false
			}
		}
		return true
	}
}
