package resolver_test

import (
	"net/url"
	"sync"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// lastStateCC keeps the last state a resolver hands it.
type lastStateCC struct {
	nopCC
	mu   *sync.Mutex
	last *grpcresolver.State
}

func (c lastStateCC) UpdateState(s grpcresolver.State) error {
	c.mu.Lock()
	*c.last = s
	c.mu.Unlock()
	return nil
}

// 1,000 channels of one service, with canaries and policies followed, hold
// one watch of each setting (counted through etcd's own watcher gauge),
// not 1,000; a change reaches every channel; when the last channel closes,
// the watches end.
func TestSettingsFollowedOncePerService(t *testing.T) {
	e := newEnv(t)
	cs, err := etcd.NewCanaries(e.cli, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := etcd.NewPolicies(e.cli, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	b := resolver.NewBuilder(e.disc, resolver.WithLogger(quiet), resolver.WithCanaries(cs), resolver.WithPolicies(ps))
	e.serve(t, "a", "v1", "")
	base := etcdtest.WatcherCount(t)
	const n = 1000
	var mu sync.Mutex
	lasts := make([]grpcresolver.State, n)
	rs := make([]grpcresolver.Resolver, n)
	for i := range n {
		// Targets with different filters are still one service.
		u := url.URL{Scheme: "muster", Path: "/greeter"}
		if i%2 == 1 {
			u.RawQuery = "version=v1"
		}
		r, err := b.Build(grpcresolver.Target{URL: u}, lastStateCC{mu: &mu, last: &lasts[i]}, grpcresolver.BuildOptions{DisableServiceConfig: true}) // a ClientConn that takes no service config
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = r
	}
	closed := false
	closeAll := func() {
		if !closed {
			for _, r := range rs {
				r.Close()
			}
			closed = true
		}
	}
	defer closeAll()
	if err := etcd.SetCanary(ctxFor(t, 10*time.Second), e.cli, "greeter", registry.Canary{Color: "blue", Percent: 5}, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	if err := etcd.SetPolicy(ctxFor(t, 10*time.Second), e.cli, "greeter", registry.Policy{MaxConcurrent: 7}, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		missing := 0
		mu.Lock()
		for i := range lasts {
			c, okc := resolver.CanaryOf(lasts[i])
			p, okp := resolver.PolicyOf(lasts[i])
			if !okc || c.Percent != 5 || !okp || p.MaxConcurrent != 7 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s, %d of %d channels lack the canary or the policy", missing, n)
		}
		time.Sleep(20 * time.Millisecond) // polling the channels' last states
	}
	added := etcdtest.WatcherCount(t) - base
	t.Logf("%d channels of one service: %v etcd watchers added (the instances, the canary, the policy)", n, added)
	// Three are this test's (one per key range followed); the gauge is
	// the process's, and the watches of earlier tests' clients still
	// closing or re-watching may move it by a few. Without the sharing it
	// is 2,000 more.
	if added > 10 {
		t.Fatalf("%d channels of one service added %v etcd watchers; want about 3 (one per key range followed), at most 10", n, added)
	}
	open := etcdtest.WatcherCount(t)
	closeAll()
	deadline = time.Now().Add(10 * time.Second)
	for open-etcdtest.WatcherCount(t) < 2 { // the canary's and the policy's end
		if time.Now().After(deadline) {
			t.Fatalf("10s after the last channel closed, %v of the %v watchers ended; want the settings' 2 at least",
				open-etcdtest.WatcherCount(t), open)
		}
		time.Sleep(20 * time.Millisecond) // polling a gauge
	}
}
