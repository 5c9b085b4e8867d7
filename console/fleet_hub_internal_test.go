package console

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/ssetest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// nextWith waits for an event of events whose data contains want.
func nextWith(t *testing.T, events <-chan ssetest.Event, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("stream ended before an event with %q", want)
			}
			if strings.Contains(ev.Data, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no event with %q within 30s", want)
		}
	}
}

// Every open services page is fed by one run of the hub, which ends with
// the last page and starts again with the next.
func TestFleetHubOneRunForAllPages(t *testing.T) {
	c := etcdtest.Start(t)
	reg, err := etcd.NewRegistrar(c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := reg.Register(ctx, registry.Instance{Name: "payments", Addr: "10.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	s, err := New(c.Client(t), WithRelistInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		_ = s.Close()
		hs.Close()
	})
	url := hs.URL + "/ui/api/services/events"
	pages, closePages := context.WithCancel(ctx)
	var streams []<-chan ssetest.Event
	for range 5 {
		ev := ssetest.Open(pages, t, url, nil)
		nextWith(t, ev, `"name":"payments"`)
		streams = append(streams, ev)
	}
	if err := reg.Register(ctx, registry.Instance{Name: "users", Addr: "10.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range streams {
		nextWith(t, ev, `"name":"users"`)
	}
	s.fleet.mu.Lock()
	runs, subs := s.fleet.run, len(s.fleet.subs)
	s.fleet.mu.Unlock()
	if runs != 1 || subs != 5 {
		t.Errorf("%d runs for %d pages, want 1 run for 5", runs, subs)
	}
	closePages()
	for _, ev := range streams {
		for range ev {
		}
	}
	// The handlers unsubscribe as they return, after the client saw the
	// stream end: wait for the last.
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.fleet.mu.Lock()
		idle := s.fleet.stop == nil && len(s.fleet.subs) == 0
		s.fleet.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hub still runs 30s after the last page closed")
		}
		time.Sleep(5 * time.Millisecond) // polling the hub's state: no event to wait on
	}
	nextWith(t, ssetest.Open(ctx, t, url, nil), `"name":"users"`)
	s.fleet.mu.Lock()
	runs = s.fleet.run
	s.fleet.mu.Unlock()
	if runs != 2 {
		t.Errorf("%d runs after a page opened again, want 2", runs)
	}
}
