package backoff

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Each failed attempt is reported with its error and a wait within the
// backoff's bounds; the attempt that ends with ctx is not reported, and
// Retry returns.
func TestRetryReportsEachFailureUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := New(time.Millisecond, 4*time.Millisecond)
	attempts := 0
	var reported []error
	Retry(ctx, b, func(context.Context) error {
		attempts++
		if attempts == 4 {
			cancel()
			return errors.New("ended by the context")
		}
		return fmt.Errorf("failure %d", attempts)
	}, func(err error, wait time.Duration) {
		if wait < 0 || wait > 4*time.Millisecond {
			t.Errorf("wait %v outside [0, 4ms]", wait)
		}
		reported = append(reported, err)
	})
	if attempts != 4 {
		t.Fatalf("%d attempts, want 4", attempts)
	}
	if len(reported) != 3 || reported[2].Error() != "failure 3" {
		t.Fatalf("reported %v, want the 3 failures", reported)
	}
}

// The wait counts from the attempt's start: an attempt that took longer
// than the delay is followed by no wait at all.
func TestRetryWaitCountsFromTheAttemptsStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := New(time.Millisecond, time.Millisecond)
	var waits []time.Duration
	Retry(ctx, b, func(context.Context) error {
		if len(waits) == 2 {
			cancel()
			return nil
		}
		time.Sleep(5 * time.Millisecond) // the attempt's own work, longer than the delay
		return errors.New("failed")
	}, func(_ error, wait time.Duration) { waits = append(waits, wait) })
	for i, w := range waits {
		if w != 0 {
			t.Fatalf("wait %d after an attempt of 5ms: %v, want 0", i, w)
		}
	}
}

// A context ended during the wait ends Retry without another attempt.
func TestRetryStopsDuringTheWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b := New(time.Hour, time.Hour)
	attempts := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Retry(ctx, b, func(context.Context) error { attempts++; return errors.New("failed") },
			func(error, time.Duration) { cancel() })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Retry still waits 10s after its context ended")
	}
	if attempts != 1 {
		t.Fatalf("%d attempts, want 1", attempts)
	}
}
