package resolver_test

import (
	"net/url"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// A channel's first state carries the service's settings: it waits for
// each source's first value (the policy here, read through a stalled
// member, so it answers after the registry and the canary), at most the
// first-state timeout. Past the timeout the channel gets the registry's
// list without them, and the settings in a later state.
func TestFirstStateWaitsForTheSettings(t *testing.T) {
	e := newEnv(t)
	m := e.c.Members()[0]
	// The registry, the discovery and the canaries talk to the member
	// directly; the policies through its proxy, which the test stalls.
	direct := e.c.Client(t, e.c.DirectEndpoints()...)
	reg, err := etcd.NewRegistrar(direct, etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	disc, err := etcd.NewDiscovery(direct, etcdopts.Discovery()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disc.Close() })
	cs, err := etcd.NewCanaries(direct, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := etcd.NewPolicies(e.cli, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	be := testbackend.Start(t)
	registrytest.RegisterEventually(t, reg, registry.Instance{Name: "greeter", ID: "a", Addr: be.Addr})
	policy := registry.Policy{Timeout: 200 * time.Millisecond}
	if err := etcd.SetPolicy(ctxFor(t, 10*time.Second), e.cli, "greeter", policy, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	canary := registry.Canary{Color: "blue", Percent: 5}
	if err := etcd.SetCanary(ctxFor(t, 10*time.Second), e.cli, "greeter", canary, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	m.Stall()
	defer m.Heal()

	build := func(firstState time.Duration) statesCC {
		t.Helper()
		b := resolver.NewBuilder(disc, resolver.WithLogger(quiet), resolver.WithCanaries(cs), resolver.WithPolicies(ps),
			resolver.WithFirstStateTimeout(firstState))
		cc := statesCC{states: make(chan grpcresolver.State, 64)}
		r, err := b.Build(grpcresolver.Target{URL: url.URL{Scheme: "muster", Path: "/greeter"}}, cc, grpcresolver.BuildOptions{DisableServiceConfig: true}) // a ClientConn that takes no service config
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return cc
	}
	next := func(cc statesCC, within time.Duration, what string) grpcresolver.State {
		t.Helper()
		select {
		case s := <-cc.states:
			if len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0].Addr != be.Addr {
				t.Fatalf("%s: endpoints %v, want a's (%s) alone", what, s.Endpoints, be.Addr)
			}
			return s
		case <-time.After(within):
			t.Fatalf("no state within %v: %s", within, what)
			return grpcresolver.State{}
		}
	}
	carries := func(s grpcresolver.State) (policyOK, canaryOK bool) {
		p, okp := resolver.PolicyOf(s)
		c, okc := resolver.CanaryOf(s)
		return okp && p.Equal(policy), okc && c == canary
	}

	// Bounded: with the policy unread, a channel whose first-state timeout
	// is 300ms gets the registry's list anyway.
	bounded := build(300 * time.Millisecond)
	s := next(bounded, 10*time.Second, "the first state, 300ms first-state timeout, the policy unread (the hold must end at the timeout)")
	if p, _ := carries(s); p {
		t.Fatalf("the first state carries the policy, read through a stalled member: %+v", s.Attributes)
	}

	// Held: a channel whose first-state timeout is long waits for the
	// policy, though the registry and the canary are read. The shared
	// watch has loaded the list before the member heals (the first
	// channel's state came from it), so without the hold the first state
	// would go out without the policy.
	held := build(time.Minute)
	w, err := disc.Watch(ctxFor(t, 10*time.Second), "greeter")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	if snap := w.Snapshot(); !snap.Loaded || len(snap.Instances) != 1 {
		t.Fatalf("the shared watch's snapshot: loaded %v, %d instances; want a loaded, after the first channel's state", snap.Loaded, len(snap.Instances))
	}
	m.Heal()
	s = next(held, 30*time.Second, "the first state after the member healed")
	if p, c := carries(s); !p || !c {
		t.Fatalf("the first state carries the policy %v and the canary %v; want both (attributes %+v)", p, c, s.Attributes)
	}
	// The bounded channel gets them in a later state.
	deadline := time.After(30 * time.Second)
	for {
		select {
		case s := <-bounded.states:
			if p, c := carries(s); p && c {
				return
			}
		case <-deadline:
			t.Fatal("after the member healed, the bounded channel got no state with the policy and the canary within 30s")
		}
	}
}
