package resolver_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/syncbuf"
	"github.com/musterhq/muster/internal/testkit/testbackend"

	"github.com/musterhq/muster/resolver"
)

// Balancers are told apart by what they do with three instances: pick_first
// sends every call to one; muster_p2c spreads them (by load, so not evenly);
// muster_wrr and round_robin take them in turn, exactly, once every
// instance is ready.
const (
	pickFirst = `{"loadBalancingConfig":[{"pick_first":{}}]}`
	musterWRR = `{"loadBalancingConfig":[{"muster_wrr":{}}]}`
)

// balancerEnv is a registry with three instances of greeter.
type balancerEnv struct {
	*env
	addrs []string
}

func newBalancerEnv(t *testing.T) balancerEnv {
	e := balancerEnv{env: newEnv(t)}
	for _, id := range []string{"a", "b", "c"} {
		e.addrs = append(e.addrs, e.serve(t, id, "v1", "").Addr)
	}
	return e
}

// spreads checks that the channel's calls reach all three instances.
func (e balancerEnv) spreads(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	callUntil(t, conn, "every instance called", hasAll(e.addrs...))
}

// sticks checks that the channel's calls all go to one instance
// (pick_first).
func (e balancerEnv) sticks(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	callUntil(t, conn, "one call served", func(c map[string]int) bool { return len(c) > 0 })
	if got := calls(t, conn, 60); len(got) != 1 {
		t.Fatalf("60 calls reached %v; want one instance (pick_first)", got)
	}
}

// rotates checks that, once every instance is ready, the channel takes
// them in turn (muster_wrr at equal weights, round_robin).
func (e balancerEnv) rotates(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	e.spreads(t, conn)
	got := calls(t, conn, 30)
	for _, a := range e.addrs {
		if got[a] != 10 {
			t.Fatalf("30 sequential calls reached %v; want 10 each (taken in turn)", got)
		}
	}
}

// A muster:/// channel with no service config of its user's balances with
// muster_p2c: gRPC's pick_first would send every call to one instance.
func TestChannelsBalanceByDefault(t *testing.T) {
	e := newBalancerEnv(t)
	e.spreads(t, dialWith(t, "muster:///greeter", grpc.WithResolvers(e.b)))
}

// Each way of choosing a channel's balancer does what the docs say: a
// resolver option and a target's lb= choose (the target first); the
// channel's own default service config is kept when it runs one of
// Muster's balancers, or when the resolver is told to hand none
// (grpc.WithDisableServiceConfig, WithBalancer("")); one that runs a
// balancer of gRPC's is replaced by muster_p2c, and the log says so.
func TestChoosingTheBalancer(t *testing.T) {
	e := newBalancerEnv(t)
	builder := func(opts ...resolver.Option) *resolver.Builder {
		t.Helper()
		b, err := resolver.New(e.disc, append([]resolver.Option{resolver.WithLogger(quiet)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("resolver option", func(t *testing.T) {
		e.sticks(t, dialWith(t, "muster:///greeter", grpc.WithResolvers(builder(resolver.WithBalancer("pick_first")))))
	})
	t.Run("target", func(t *testing.T) {
		e.rotates(t, dialWith(t, "muster:///greeter?lb=wrr", grpc.WithResolvers(e.b)))
		e.sticks(t, dialWith(t, "muster:///greeter?lb=pick_first", grpc.WithResolvers(e.b)))
	})
	t.Run("target over option", func(t *testing.T) {
		e.rotates(t, dialWith(t, "muster:///greeter?lb=wrr", grpc.WithResolvers(builder(resolver.WithBalancer("pick_first")))))
	})
	t.Run("WithDefaultServiceConfig of a Muster balancer is kept", func(t *testing.T) {
		e.rotates(t, dialWith(t, "muster:///greeter", grpc.WithResolvers(e.b), grpc.WithDefaultServiceConfig(musterWRR)))
	})
	t.Run("WithDefaultServiceConfig of gRPC's is replaced, and the log says so", func(t *testing.T) {
		var log syncbuf.Buffer
		b := builder(resolver.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
		e.spreads(t, dialWith(t, "muster:///greeter", grpc.WithResolvers(b), grpc.WithDefaultServiceConfig(pickFirst)))
		for _, want := range []string{"muster_p2c", "grpc.WithDefaultServiceConfig", "grpc.WithDisableServiceConfig()", `resolver.WithBalancer(\"\")`} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("the log does not name %s: %s", want, log.String())
			}
		}
	})
	t.Run("WithDefaultServiceConfig kept with WithDisableServiceConfig", func(t *testing.T) {
		e.sticks(t, dialWith(t, "muster:///greeter", grpc.WithResolvers(e.b),
			grpc.WithDefaultServiceConfig(pickFirst), grpc.WithDisableServiceConfig()))
	})
	t.Run(`WithDefaultServiceConfig kept with WithBalancer("")`, func(t *testing.T) {
		e.sticks(t, dialWith(t, "muster:///greeter", grpc.WithResolvers(builder(resolver.WithBalancer(""))),
			grpc.WithDefaultServiceConfig(pickFirst)))
	})
}

// A balancer no one registered, and two options that both choose, are
// errors naming the problem.
func TestBadBalancerChoices(t *testing.T) {
	e := newEnv(t)
	if _, err := resolver.New(e.disc, resolver.WithBalancer("nope")); err == nil || !strings.Contains(err.Error(), `WithBalancer("nope"): no balancer is registered`) {
		t.Errorf("WithBalancer(nope): %v", err)
	}
	_, err := resolver.New(e.disc, resolver.WithBalancer("muster_wrr"), resolver.WithPolicyServiceConfig(`[{"round_robin":{}}]`))
	if err == nil || !strings.Contains(err.Error(), "WithBalancer and WithPolicyServiceConfig both choose") {
		t.Errorf("WithBalancer and WithPolicyServiceConfig: %v", err)
	}
	u, _ := url.Parse("muster:///greeter?lb=nope")
	if _, err := e.b.Build(grpcresolver.Target{URL: *u}, nil, grpcresolver.BuildOptions{}); !errors.Is(err, resolver.ErrBadTarget) ||
		!strings.Contains(err.Error(), "lb=nope names no balancer; want p2c, wrr or the name of a balancer registered with gRPC") {
		t.Errorf("lb=nope: %v", err)
	}
}

// A call that finds no instance says which service, where it was looked
// up and what the registry said: nothing registered, or instances that the
// target's filters leave out. The channels choose muster_p2c (lb=p2c):
// a channel that chooses nothing is first handed a state without a service
// config (decideDefault), whose empty list gRPC's pick_first answers with
// its own "produced zero addresses" before muster_p2c takes over.
func TestNoInstanceSaysWhichServiceAndWhere(t *testing.T) {
	e := newEnv(t)
	e.serve(t, "a", "v1", "")
	for _, c := range []struct{ target, want string }{
		{"muster:///nobody?lb=p2c", `^muster_p2c: no instance of service "nobody" to call \(looked up in etcd \S+, keys under /muster/services/nobody/\): ` +
			`the registry answered \(revision \d+\) and lists none$`},
		{"muster:///greeter?version=v9&lb=p2c", `^muster_p2c: no instance of service "greeter" to call \(looked up in etcd \S+, keys under /muster/services/greeter/\): ` +
			`the registry lists 1, none passes the target's filters \(version=v9\)$`},
	} {
		conn := dialWith(t, c.target, grpc.WithResolvers(e.b))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := testbackend.Call(ctx, conn)
		cancel()
		if status.Code(err) != codes.Unavailable || !regexp.MustCompile(c.want).MatchString(status.Convert(err).Message()) {
			t.Errorf("%s: %v; want Unavailable matching %s", c.target, err, c.want)
		}
	}
}
