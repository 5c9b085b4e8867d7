package console_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
)

// A service page's stream is opened only for a service the registry lists:
// 2,000 requests for made-up names get 404 and open no etcd watch (without
// the check each opened one, 4,002 watchers in a review's run).
func TestStreamsOfMadeUpServicesOpenNoWatch(t *testing.T) {
	f := newFixture(t)
	f.register(registry.Instance{Name: "payments", ID: "p-1", Addr: "10.0.0.1:9000"})
	before := etcdtest.WatcherCount(t)
	var wg sync.WaitGroup
	codes := make(chan int, 2000)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 2000; i += 8 {
				resp, err := http.Get(fmt.Sprintf("%sapi/service/events?name=made-up-%d", f.url, i))
				if err != nil {
					codes <- 0
					continue
				}
				_ = resp.Body.Close()
				codes <- resp.StatusCode
			}
		}()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusNotFound {
			t.Fatalf("a stream of a made-up service: status %d, want 404", c)
		}
	}
	// The registrar's watch of its own keys may open meanwhile: allow a
	// few, not one per request.
	if after := etcdtest.WatcherCount(t); after > before+4 {
		t.Errorf("etcd watchers %v before, %v after 2,000 made-up names; want none opened for them", before, after)
	}
	// A listed service's page is served as before.
	if ev := firstEvent(t, f.url+"api/service/events?name=payments", ""); ev.Name != "state" {
		t.Errorf("payments' first event %q, want state", ev.Name)
	}
}

// One client address opens at most 32 event streams at once; the 33rd is
// refused with 429 and says why, and a stream ending gives its place back.
func TestEventStreamsPerClientBounded(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open []*http.Response
	for range 32 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"api/services/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %v %v", len(open)+1, resp.Status, err)
		}
		open = append(open, resp)
	}
	resp, err := http.Get(f.url + "api/services/events")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a 33rd stream: %s, want 429 with Retry-After", resp.Status)
	}
	_ = open[0].Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(f.url + "api/services/events")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream after one ended: still %v %v after 5 s", resp.Status, err)
		}
		time.Sleep(20 * time.Millisecond) // bounded poll: the server notices the closed stream on its next write or read
	}
	for _, r := range open[1:] {
		_ = r.Body.Close()
	}
}
