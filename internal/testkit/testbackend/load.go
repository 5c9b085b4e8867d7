package testbackend

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// Load issues unary calls (Call) from several workers until Finish,
// counting successes per backend address and failures. Each worker has one
// call in flight at a time, so at most as many calls as workers can be cut
// by a backend's crash.
type Load struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup

	mu       sync.Mutex
	ok       map[string]int
	failures []error
	total    int
}

// StartLoad starts workers calling through conn. The load ends by itself
// after two minutes whatever the test does.
func StartLoad(conn grpc.ClientConnInterface, workers int) *Load {
	l := &Load{ok: map[string]int{}, stop: make(chan struct{})}
	deadline := time.Now().Add(2 * time.Minute)
	for w := 0; w < workers; w++ {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			for time.Now().Before(deadline) {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				addr, err := Call(ctx, conn)
				cancel()
				l.mu.Lock()
				l.total++
				if err != nil {
					l.failures = append(l.failures, err)
				} else {
					l.ok[addr]++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// Calls returns how many calls addr has served so far.
func (l *Load) Calls(addr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok[addr]
}

// Counts returns the calls made and failed so far.
func (l *Load) Counts() (total, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, len(l.failures)
}

// WaitFor waits until addr has served at least one call, failing t after
// 10s.
func (l *Load) WaitFor(t testing.TB, addr string) {
	t.Helper()
	l.waitUntil(t, addr, 1)
}

// WaitForMore waits until addr has served n calls more than it had when
// called, failing t after 10s.
func (l *Load) WaitForMore(t testing.TB, addr string, n int) {
	t.Helper()
	l.waitUntil(t, addr, l.Calls(addr)+n)
}

func (l *Load) waitUntil(t testing.TB, addr string, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); l.Calls(addr) < want; {
		if time.Now().After(deadline) {
			t.Fatalf("testbackend: %s served %d calls within 10s, want %d", addr, l.Calls(addr), want)
		}
		time.Sleep(10 * time.Millisecond) // polling the load's counters
	}
}

// Finish stops the workers and returns the calls made and the failures.
// Later calls return the same.
func (l *Load) Finish() (total int, failures []error) {
	l.stopOnce.Do(func() { close(l.stop) })
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.failures
}
