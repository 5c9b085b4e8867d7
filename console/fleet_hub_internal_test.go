package console

import (
	"context"
	"encoding/json"
	"fmt"
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
	nextMatching(t, events, fmt.Sprintf("an event with %q", want), func(data string) bool { return strings.Contains(data, want) })
}

// nextMatching waits for an event of events whose data match accepts,
// failing with what after 30 s.
func nextMatching(t *testing.T, events <-chan ssetest.Event, what string, match func(data string) bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("stream ended before %s", what)
			}
			if match(ev.Data) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s within 30s", what)
		}
	}
}

// Every open services page is fed by one run of the hub, which ends with
// the last page and starts again with the next.
func TestFleetHubOneRunForAllPages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, s, url := startFleetConsole(ctx, t, registry.Instance{Name: "payments", Addr: "10.0.0.1:1"})
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
	waitHubIdle(t, s)
	nextWith(t, ssetest.Open(ctx, t, url, nil), `"name":"users"`)
	s.fleet.mu.Lock()
	runs = s.fleet.run
	s.fleet.mu.Unlock()
	if runs != 2 {
		t.Errorf("%d runs after a page opened again, want 2", runs)
	}
}

// lastChangeOf waits for an event of events listing service as cond
// wants it, with a last change, and returns that.
func lastChangeOf(t *testing.T, events <-chan ssetest.Event, service string, cond func(serviceRow) bool) time.Time {
	t.Helper()
	var at time.Time
	nextMatching(t, events, "an event with "+service+" as wanted", func(data string) bool {
		var v fleetView
		if json.Unmarshal([]byte(data), &v) != nil {
			return false
		}
		for _, r := range v.Services {
			if r.Name == service && cond(r) && r.LastChange != nil {
				at = *r.LastChange
				return true
			}
		}
		return false
	})
	return at
}

// startFleetConsole starts etcd with instances registered and a console
// relisting every 100 ms; it returns the registrar, the console and the
// services page's stream address.
func startFleetConsole(ctx context.Context, t *testing.T, instances ...registry.Instance) (*etcd.Registrar, *Server, string) {
	t.Helper()
	c := etcdtest.Start(t)
	reg, err := etcd.NewRegistrar(c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	for _, in := range instances {
		if err := reg.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	store, err := etcd.NewStore(c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	s, err := New(store, WithRelistInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		_ = s.Close()
		hs.Close()
	})
	return reg, s, hs.URL + "/ui/api/services/events"
}

// waitHubIdle waits until the hub's run ended with its last page.
func waitHubIdle(t *testing.T, s *Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.fleet.mu.Lock()
		idle := s.fleet.stop == nil && len(s.fleet.subs) == 0
		s.fleet.mu.Unlock()
		if idle {
			s.fleet.runs.Wait()
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the hub still runs 30s after the last page closed")
		}
		time.Sleep(5 * time.Millisecond) // polling the hub's state: no event to wait on
	}
}

// A removal seen by one run is the last change the next run shows (a page
// reopened, or back from a service's page), not the newest registration of
// the instances left, which is older; a change made while no page was
// open is dated when a page sees it.
func TestFleetLastChangeSurvivesRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := registry.Instance{ID: "b", Name: "payments", Addr: "10.0.0.1:2"}
	reg, s, url := startFleetConsole(ctx, t, registry.Instance{ID: "a", Name: "payments", Addr: "10.0.0.1:1"}, b)
	instances := func(n int) func(serviceRow) bool { return func(r serviceRow) bool { return r.Instances == n } }

	page, closePage := context.WithCancel(ctx)
	ev := ssetest.Open(page, t, url, nil)
	lastChangeOf(t, ev, "payments", instances(2))
	removed := time.Now()
	if err := reg.Deregister(ctx, b.Name, b.ID); err != nil {
		t.Fatal(err)
	}
	seen := lastChangeOf(t, ev, "payments", instances(1))
	if seen.Before(removed) {
		t.Fatalf("last change %v after b was removed at %v: want the removal's time", seen, removed)
	}
	closePage()
	for range ev {
	}
	waitHubIdle(t, s)

	page, closePage = context.WithCancel(ctx)
	ev = ssetest.Open(page, t, url, nil)
	if got := lastChangeOf(t, ev, "payments", instances(1)); !got.Equal(seen) {
		t.Errorf("reopened page: last change %v, want %v, the removal the first page saw, not a's registration", got, seen)
	}
	closePage()
	for range ev {
	}
	waitHubIdle(t, s)

	// Changed while no page was open: dated when a page sees it.
	if err := reg.Register(ctx, registry.Instance{ID: "a", Name: "payments", Addr: "10.0.0.1:1", Draining: true}); err != nil {
		t.Fatal(err)
	}
	reopened := time.Now()
	page, closePage = context.WithCancel(ctx)
	defer closePage()
	ev = ssetest.Open(page, t, url, nil)
	if got := lastChangeOf(t, ev, "payments", func(r serviceRow) bool { return r.Draining == 1 }); got.Before(reopened) {
		t.Errorf("a drain made while no page was open: last change %v, want when a page saw it (after %v)", got, reopened)
	}
}
