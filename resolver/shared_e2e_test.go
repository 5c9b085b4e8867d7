package resolver_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
)

// The channels of a Builder that resolve the same target share one
// Discovery watcher and are handed the same state arrays (one list's
// endpoints per change, however many channels); a target with other
// filters has its own. A closed channel is called no more while the others
// keep following the registry.
func TestChannelsOfATargetShareAWatcherAndStates(t *testing.T) {
	e := newEnv(t)
	watchers0 := e.disc.Stats().Watchers
	build := func(query string) (statesCC, grpcresolver.Resolver) {
		t.Helper()
		cc := statesCC{states: make(chan grpcresolver.State, 64)}
		r, err := e.b.Build(grpcresolver.Target{URL: url.URL{Scheme: "muster", Path: "/greeter", RawQuery: query}}, cc, grpcresolver.BuildOptions{DisableServiceConfig: true}) // a ClientConn that takes no service config
		if err != nil {
			t.Fatal(err)
		}
		return cc, r
	}
	ccA, rA := build("")
	ccB, rB := build("")
	ccC, rC := build("version=v2")
	defer rB.Close()
	defer rC.Close()
	if got := e.disc.Stats().Watchers - watchers0; got != 2 {
		t.Fatalf("3 channels on 2 targets hold %d Discovery watchers, want 2 (one per target)", got)
	}
	register := func(id, version string, port int) {
		t.Helper()
		in := registry.Instance{Name: "greeter", ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", port), Version: version}
		if err := e.reg.Register(ctxFor(t, 10*time.Second), in); err != nil {
			t.Fatal(err)
		}
	}
	register("a", "v1", 1001)
	sa, sb := awaitEndpoints(t, ccA, 1), awaitEndpoints(t, ccB, 1)
	if &sa.Endpoints[0] != &sb.Endpoints[0] || &sa.Addresses[0] != &sb.Addresses[0] {
		t.Fatal("two channels of one target were handed arrays of their own, want the same arrays")
	}
	register("b", "v2", 1002)
	sc := awaitEndpoints(t, ccC, 1)
	if sc.Endpoints[0].Addresses[0].Addr != "127.0.0.1:1002" {
		t.Fatalf("channel filtered on v2 has %s, want b", sc.Endpoints[0].Addresses[0].Addr)
	}
	awaitEndpoints(t, ccA, 2)
	awaitEndpoints(t, ccB, 2)

	rA.Close()
	register("c", "v1", 1003)
	awaitEndpoints(t, ccB, 3)
	for {
		select {
		case s := <-ccA.states:
			if len(s.Endpoints) == 3 {
				t.Fatal("channel closed before c registered was handed a state with c")
			}
			continue
		default:
		}
		break
	}
}

// awaitEndpoints returns the first state cc is handed with n endpoints,
// failing t after 10s.
func awaitEndpoints(t *testing.T, cc statesCC, n int) grpcresolver.State {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-cc.states:
			if len(s.Endpoints) == n {
				return s
			}
		case <-deadline:
			t.Fatalf("no state of %d endpoints within 10s", n)
		}
	}
}
