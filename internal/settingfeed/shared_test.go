package settingfeed

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// follower is a backend's follower of one setting per service, counting
// the followers running.
type follower struct {
	mu      sync.Mutex
	running map[string]int
	started map[string]int
	values  map[string]chan int // what the test sends as the stored value
}

func newFollower() *follower {
	return &follower{running: map[string]int{}, started: map[string]int{}, values: map[string]chan int{}}
}

func (f *follower) follow(ctx context.Context, service string) <-chan int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[service]++
	f.started[service]++
	in := make(chan int)
	f.values[service] = in
	out := make(chan int, 1)
	go func() {
		defer func() {
			f.mu.Lock()
			f.running[service]--
			f.mu.Unlock()
			close(out)
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case v := <-in:
				Send(out, []byte{byte(v)}, func(b []byte) (int, error) { return int(b[0]), nil }, nil)
			}
		}
	}()
	return out
}

func (f *follower) store(t *testing.T, service string, v int) {
	t.Helper()
	f.mu.Lock()
	in := f.values[service]
	f.mu.Unlock()
	select {
	case in <- v:
	case <-time.After(5 * time.Second):
		t.Fatalf("no follower of %s took a value", service)
	}
}

func (f *follower) counts(service string) (running, started int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[service], f.started[service]
}

func next(t *testing.T, ch <-chan int) int {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("no value within 5s")
		return 0
	}
}

// Readers of one service share one follower: a late reader gets the value
// read already, every reader each change, and the follower stops with
// the last reader.
func TestSharedFollowsOncePerService(t *testing.T) {
	f := newFollower()
	s := &Shared[int]{Follow: f.follow}
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	a := s.Watch(ctx1, "user")
	f.store(t, "user", 1)
	if v := next(t, a); v != 1 {
		t.Fatalf("first reader got %d, want 1", v)
	}
	b := s.Watch(ctx2, "user")
	if v := next(t, b); v != 1 {
		t.Fatalf("late reader got %d, want the value read already, 1", v)
	}
	if running, started := f.counts("user"); running != 1 || started != 1 {
		t.Fatalf("followers of user: %d running, %d started; want one for both readers", running, started)
	}
	f.store(t, "user", 2)
	if va, vb := next(t, a), next(t, b); va != 2 || vb != 2 {
		t.Fatalf("after a change the readers got %d and %d, want 2", va, vb)
	}
	cancel1()
	if _, ok := <-a; ok {
		t.Fatal("a reader's channel still open after its context ended")
	}
	if running, _ := f.counts("user"); running != 1 {
		t.Fatal("the follower stopped while a reader remains")
	}
	cancel2()
	if _, ok := <-b; ok {
		t.Fatal("the last reader's channel still open after its context ended")
	}
	deadline := time.Now().Add(5 * time.Second)
	for running, _ := f.counts("user"); running != 0; running, _ = f.counts("user") {
		if time.Now().After(deadline) {
			t.Fatal("the follower still runs after its last reader left")
		}
		time.Sleep(time.Millisecond)
	}
	c := s.Watch(t.Context(), "user")
	f.store(t, "user", 3)
	if v := next(t, c); v != 3 {
		t.Fatalf("a reader after the last left got %d, want 3 from a new follower", v)
	}
	if _, started := f.counts("user"); started != 2 {
		t.Fatalf("%d followers started, want a second one for the new reader", started)
	}
}
