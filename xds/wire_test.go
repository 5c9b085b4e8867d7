package xds

import (
	"bytes"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/registry"
)

// The assignment with cached serialized endpoints decodes, at the client,
// to exactly the assignment built field by field, through a sequence of
// changes (an instance added, drained, re-weighted, its metadata changed,
// moved to another zone, removed), for clients of every zone; and the cache
// keeps only the current instances.
func TestWireAssignment(t *testing.T) {
	a := inst("a", "10.0.0.1:80", "z1", 100)
	b := inst("b", "10.0.0.2:80", "z2", 100)
	c := inst("c", "10.0.0.3:80", "z2", 200)
	drained := b
	drained.Draining = true
	heavier := c
	heavier.Weight = 300
	recolored := a
	recolored.Metadata = map[string]string{"color": "green", "tier": "1"}
	moved := c
	moved.Zone = "z1"
	steps := [][]registry.Instance{
		{a, b},
		{a, b, c},
		{a, drained, c},
		{a, drained, heavier},
		{recolored, drained, heavier},
		{recolored, drained, moved},
		{recolored, moved},
		{},
	}
	for _, metadata := range []bool{false, true} {
		testWireSteps(t, steps, metadata)
	}
}

// testWireSteps checks the steps with a cache of its own for endpoints
// with their instance or without (a Server's choice, the same for all).
func testWireSteps(t *testing.T, steps [][]registry.Instance, metadata bool) {
	t.Helper()
	var eb endpointBytes
	for i, list := range steps {
		for _, zone := range []string{"", "z1", "z2", "z3"} {
			v := view{zone: zone, metadata: metadata}
			wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(eb.wireAssignment("greeter", list, v))
			if err != nil {
				t.Fatal(err)
			}
			var got endpointv3.ClusterLoadAssignment
			if err := proto.Unmarshal(wire, &got); err != nil {
				t.Fatalf("step %d, zone %q: %v", i, zone, err)
			}
			if want := assignment("greeter", list, v); !proto.Equal(&got, want) {
				t.Fatalf("step %d, zone %q, metadata %v: decoded\n%v\nwant\n%v", i, zone, metadata, &got, want)
			}
		}
		eb.keepOnly(list)
		if len(eb.m) != len(list) {
			t.Errorf("step %d: %d endpoints cached for %d instances", i, len(eb.m), len(list))
		}
	}
}

// A cached endpoint is the endpoint of the instance as it is now: after a
// change of any field, get returns what marshalling the changed instance
// gives, with and without the instance in the metadata.
func TestEndpointBytesFollowChanges(t *testing.T) {
	base := inst("a", "10.0.0.1:80", "z1", 100)
	variants := []func(*registry.Instance){
		func(in *registry.Instance) { in.Addr = "10.0.0.1:81" },
		func(in *registry.Instance) { in.Zone = "z2" },
		func(in *registry.Instance) { in.Version = "v2" },
		func(in *registry.Instance) { in.Weight = 101 },
		func(in *registry.Instance) { in.Draining = true },
		func(in *registry.Instance) { in.Metadata = map[string]string{"color": "blue", "x": ""} },
		func(in *registry.Instance) { in.Metadata = map[string]string{"colo": "rblue"} },
	}
	for _, metadata := range []bool{false, true} {
		var eb endpointBytes
		eb.get(base, metadata)
		for i, v := range variants {
			in := base
			in.Metadata = map[string]string{"color": "blue"}
			v(&in)
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(lbEndpoint(in, metadata))
			if err != nil {
				t.Fatal(err)
			}
			if got := eb.get(in, metadata); !bytes.Equal(got, want) {
				t.Errorf("metadata %v, variant %d: cached endpoint is not the changed instance's", metadata, i)
			}
		}
	}
}
