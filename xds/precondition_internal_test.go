package xds

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/internal/xdscheck"
	"github.com/musterhq/muster/registry"
)

// checkAll fails t for every precondition of an xDS client that one of
// res breaks.
func checkAll(t *testing.T, what string, res ...proto.Message) {
	t.Helper()
	checkFor(t, what, xdscheck.AllClients, res...)
}

// checkFor fails t for every precondition of the clients of audience that
// one of res breaks.
func checkFor(t *testing.T, what string, audience xdscheck.Family, res ...proto.Message) {
	t.Helper()
	for _, r := range res {
		for _, v := range xdscheck.CheckFor(r, audience) {
			t.Errorf("%s: %v", what, v)
		}
	}
}

// Every Cluster form meets every client's preconditions: with and without
// a call policy, with a policy that ejects nothing (the standby, whose
// minimum hosts a Java int must hold), under every policy.
func TestClustersMeetPreconditions(t *testing.T) {
	for _, p := range []LBPolicy{RoundRobin, RingHash, LeastRequest, MusterP2C, MusterWRR} {
		for _, call := range []registry.Policy{{}, testCallPolicy, {MaxConcurrent: registry.MaxConcurrentLimit}} {
			cl := clusterFor("greeter", p, musterConfig{weights: map[string]int{"10.0.0.1:80": 10_000}})
			applyClusterPolicy(cl, clusterParts(call))
			checkAll(t, string(p), cl)
		}
	}
}

// Every assignment form meets every client's preconditions, colored ones
// with zones and regions included: a color's base copies repeat the
// color's localities at later priorities, which must stay distinct.
func TestAssignmentsMeetPreconditions(t *testing.T) {
	in := func(id, addr, region, zone, c string, w int) registry.Instance {
		i := withColor(inst(id, addr, zone, w), c)
		i.Region = region
		return i
	}
	list := []registry.Instance{
		in("a", "10.0.0.1:80", "r1", "z1", "", 100),
		in("b", "10.0.0.2:80", "r1", "z2", "", 100),
		in("c", "10.0.0.3:80", "r2", "z3", "", 100),
		in("d", "10.0.0.4:80", "r1", "z1", "blue", 100),
		in("e", "10.0.0.5:80", "r2", "z3", "blue", 10_000),
		in("f", "10.0.0.6:80", "r1", "z1", "green", 0),
		in("g", "10.0.0.7:80", "", "", "blue", 100),
		in("h", "10.0.0.8:80", "", "", "", 100),
	}
	for _, v := range []view{{}, {zone: "z1"}, {region: "r1", zone: "z1"}, {region: "r2", zone: "z3"}, {region: "r9", zone: "z9"}} {
		for _, ring := range []bool{false, true} {
			v.ringHash = ring
			for name, cla := range assignments("greeter", list, v, assignment) {
				checkAll(t, name+" for "+locality{v.region, v.zone}.String(), cla)
			}
			eb := &endpointBytes{}
			for name, cla := range assignments("greeter", list, v, eb.wireAssignment) {
				checkAll(t, name+" (wire) for "+locality{v.region, v.zone}.String(), cla)
			}
		}
	}
}

// Every route meets the preconditions of the clients that get it, in
// each form (routeForm): a policy with the default backoffs (100 ms to
// 1 s, which grpc-js-xds would read as 10 s) and with the longest.
func TestRoutesMeetPreconditions(t *testing.T) {
	longest := registry.Policy{Timeout: registry.MaxPolicyTimeout, Retry: registry.RetryPolicy{MaxAttempts: registry.MaxRetryAttempts,
		Codes: []string{"UNAVAILABLE"}, BackoffBase: time.Minute, BackoffMax: 5 * time.Minute}}.Normalize()
	defaults := registry.Policy{Timeout: time.Millisecond, Retry: registry.RetryPolicy{MaxAttempts: 2, Codes: []string{"UNAVAILABLE"}}}.Normalize()
	for _, co := range []coloring{
		{},
		{colors: []string{"blue", "green"}},
		{colors: []string{"blue"}, canary: registry.Canary{Color: "blue", Percent: 20}, hash: true, call: routeParts(testCallPolicy)},
		{colors: []string{"blue"}, canary: registry.Canary{Color: "blue", Percent: 100}, call: routeParts(defaults)},
		{colors: []string{"blue"}, canary: registry.Canary{Color: "blue", Percent: 0.01}, call: routeParts(longest)},
	} {
		for f := range numRouteForms {
			form := co
			form.call = f.apply(co.call)
			checkFor(t, fmt.Sprintf("route of form %d", f), f.audience(), routeWithColors("greeter", form))
		}
	}
	l, err := listenerFor("greeter")
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, "listener", l)
}
