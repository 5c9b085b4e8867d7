package xds

import (
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
	var eb endpointBytes
	for i, list := range steps {
		for _, zone := range []string{"", "z1", "z2", "z3"} {
			wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(eb.wireAssignment("greeter", list, view{zone: zone}))
			if err != nil {
				t.Fatal(err)
			}
			var got endpointv3.ClusterLoadAssignment
			if err := proto.Unmarshal(wire, &got); err != nil {
				t.Fatalf("step %d, zone %q: %v", i, zone, err)
			}
			if want := assignment("greeter", list, view{zone: zone}); !proto.Equal(&got, want) {
				t.Fatalf("step %d, zone %q: decoded\n%v\nwant\n%v", i, zone, &got, want)
			}
		}
		eb.keepOnly(list)
		if len(eb.m) != len(list) {
			t.Errorf("step %d: %d endpoints cached for %d instances", i, len(eb.m), len(list))
		}
	}
}

func TestInstanceKeyDistinguishes(t *testing.T) {
	base := inst("a", "10.0.0.1:80", "z1", 100)
	variants := []func(*registry.Instance){
		func(in *registry.Instance) { in.ID = "b" },
		func(in *registry.Instance) { in.Addr = "10.0.0.1:81" },
		func(in *registry.Instance) { in.Zone = "z2" },
		func(in *registry.Instance) { in.Version = "v2" },
		func(in *registry.Instance) { in.Weight = 101 },
		func(in *registry.Instance) { in.Draining = true },
		func(in *registry.Instance) { in.Metadata = map[string]string{"color": "blue", "x": ""} },
		func(in *registry.Instance) { in.Metadata = map[string]string{"colo": "rblue"} },
	}
	seen := map[string]int{instanceKey(base): -1}
	for i, v := range variants {
		in := base
		in.Metadata = map[string]string{"color": "blue"}
		v(&in)
		k := instanceKey(in)
		if j, dup := seen[k]; dup {
			t.Errorf("variant %d has the key of %d", i, j)
		}
		seen[k] = i
	}
}
