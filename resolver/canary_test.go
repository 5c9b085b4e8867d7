package resolver_test

import (
	"net/url"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// statesCC records every state a resolver hands it.
type statesCC struct {
	nopCC
	states chan grpcresolver.State
}

func (c statesCC) UpdateState(s grpcresolver.State) error {
	c.states <- s
	return nil
}

// With WithCanaries, a change of the canary setting alone pushes the same
// endpoints again, with the new setting as a state attribute.
func TestCanaryChangesReachTheState(t *testing.T) {
	e := newEnv(t)
	cs, err := etcd.NewCanaries(e.cli, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	b := resolver.NewBuilder(e.disc, resolver.WithLogger(quiet), resolver.WithCanaries(cs))
	be := e.serve(t, "a", "v1", "z1")
	cc := statesCC{states: make(chan grpcresolver.State, 64)}
	r, err := b.Build(grpcresolver.Target{URL: url.URL{Scheme: "muster", Path: "/greeter"}}, cc, grpcresolver.BuildOptions{DisableServiceConfig: true}) // a ClientConn that takes no service config
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	await := func(what string, cond func(grpcresolver.State) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case s := <-cc.states:
				if cond(s) {
					return
				}
			case <-deadline:
				t.Fatalf("no state %s within 10s", what)
			}
		}
	}
	onlyA := func(s grpcresolver.State) bool {
		return len(s.Endpoints) == 1 && s.Endpoints[0].Addresses[0].Addr == be.Addr
	}
	await("with a and no canary", func(s grpcresolver.State) bool {
		_, ok := resolver.CanaryOf(s)
		return onlyA(s) && !ok
	})
	want := registry.Canary{Color: "blue", Percent: 5}
	if err := etcd.SetCanary(ctxFor(t, 5*time.Second), e.cli, "greeter", want, etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	await("with a and the canary", func(s grpcresolver.State) bool {
		c, ok := resolver.CanaryOf(s)
		return onlyA(s) && ok && c == want
	})
	if err := etcd.ClearCanary(ctxFor(t, 5*time.Second), e.cli, "greeter", etcdopts.Write()...); err != nil {
		t.Fatal(err)
	}
	await("with a and the canary cleared", func(s grpcresolver.State) bool {
		_, ok := resolver.CanaryOf(s)
		return onlyA(s) && !ok
	})
}
