package resolver_test

import (
	"context"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/resolver"
)

// invalidOptions are each option given a value it refuses, with the name
// its error must carry.
var invalidOptions = []struct {
	opt  resolver.Option
	name string
}{
	{resolver.WithScheme(""), `WithScheme("")`},
	{resolver.WithFirstStateTimeout(0), "WithFirstStateTimeout(0s)"},
	{resolver.WithFirstStateTimeout(-time.Second), "WithFirstStateTimeout(-1s)"},
	{resolver.WithProtection(2, time.Second), "WithProtection(2, 1s)"},
	{resolver.WithProtection(-0.1, time.Second), "WithProtection(-0.1, 1s)"},
	{resolver.WithProtection(math.NaN(), time.Second), "WithProtection(NaN, 1s)"},
	{resolver.WithProtection(0.5, 0), "WithProtection(0.5, 0s)"},
	{resolver.WithSubset(-1), "WithSubset(-1)"},
	{resolver.WithClientID(""), `WithClientID("")`},
	{resolver.WithLogger(nil), "WithLogger(nil)"},
	{resolver.WithPolicyServiceConfig(`{"muster_p2c":{}}`), `WithPolicyServiceConfig("{\"muster_p2c\":{}}")`},
	{resolver.WithPolicyServiceConfig(""), `WithPolicyServiceConfig("")`},
}

// Each invalid option makes New fail with an error naming it; several are
// all named; valid options, the limits included, build.
func TestNewRefusesInvalidOptions(t *testing.T) {
	e := newEnv(t)
	for _, tc := range invalidOptions {
		b, err := resolver.New(e.disc, resolver.WithLogger(quiet), tc.opt)
		if err == nil || b != nil || !strings.HasPrefix(err.Error(), "resolver: "+tc.name+": ") {
			t.Errorf("New with %s = %v, %v; want an error starting %q", tc.name, b, err, "resolver: "+tc.name+": ")
		}
	}
	_, err := resolver.New(e.disc, resolver.WithSubset(-1), resolver.WithScheme(""))
	if err == nil || !strings.Contains(err.Error(), "WithSubset(-1)") || !strings.Contains(err.Error(), `WithScheme("")`) {
		t.Errorf("New with two invalid options: %v, want both named", err)
	}
	if _, err := resolver.New(nil); err == nil || !strings.Contains(err.Error(), "nil Discovery") {
		t.Errorf("New(nil) = %v, want an error naming the nil Discovery", err)
	}
	b, err := resolver.New(e.disc, resolver.WithLogger(quiet), resolver.WithProtection(0, time.Second), resolver.WithProtection(1, time.Second),
		resolver.WithSubset(0), resolver.WithFirstStateTimeout(time.Nanosecond), resolver.WithPolicyServiceConfig(`[{"round_robin":{}}]`),
		resolver.WithCanaries(nil), resolver.WithPolicies(nil))
	if err != nil || b == nil || b.Scheme() != resolver.DefaultScheme {
		t.Fatalf("New with valid options = %v, %v", b, err)
	}
}

// A Builder from NewBuilder with an invalid option fails every channel:
// a call fails with Unavailable and the error naming the option, instead
// of the option being ignored.
func TestNewBuilderWithAnInvalidOptionFailsItsChannels(t *testing.T) {
	e := newEnv(t)
	e.serve(t, "a", "", "")
	for _, tc := range invalidOptions {
		if tc.name == `WithScheme("")` {
			continue // the channel's target names the scheme: tested by Build below
		}
		b := resolver.NewBuilder(e.disc, resolver.WithLogger(quiet), tc.opt)
		conn := dial(t, grpc.WithResolvers(b), "muster:///greeter")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		cancel()
		t.Logf("%s: %v", tc.name, err)
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "resolver: "+tc.name+": ") {
			t.Errorf("a call through a Builder with %s: %v; want Unavailable naming the option", tc.name, err)
		}
		_ = conn.Close()
	}
	b := resolver.NewBuilder(e.disc, resolver.WithLogger(quiet), resolver.WithScheme(""))
	if _, err := b.Build(grpcresolver.Target{URL: url.URL{Scheme: "muster", Path: "/greeter"}}, nopCC{}, grpcresolver.BuildOptions{}); err == nil || !strings.Contains(err.Error(), `WithScheme("")`) {
		t.Errorf("Build with WithScheme(\"\") = %v, want an error naming it", err)
	}
}
