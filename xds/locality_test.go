package xds

import (
	"testing"

	"github.com/musterhq/muster/registry"
)

// instIn is inst in a region.
func instIn(id, addr, region, zone string, weight int) registry.Instance {
	in := inst(id, addr, zone, weight)
	in.Region = region
	return in
}

// Priorities follow the client's zone, then its region, then everything
// else; a level taking no calls joins the next, and priorities have no
// gap. Every locality carries its region.
func TestAssignmentRegionLevels(t *testing.T) {
	list := []registry.Instance{
		instIn("a", "10.0.0.1:80", "r1", "z1", 100),
		instIn("b", "10.0.0.2:80", "r1", "z2", 100),
		instIn("c", "10.0.0.3:80", "r2", "z3", 100),
		instIn("d", "10.0.0.4:80", "", "", 100),
	}
	for _, tc := range []struct {
		name         string
		region, zone string
		drain        []int // indexes of list drained
		want         map[string]uint32
	}{
		{"zone, region, elsewhere", "r1", "z1", nil, map[string]uint32{"z1": 0, "z2": 1, "z3": 2, "": 2}},
		{"a zone of another region", "r2", "z3", nil, map[string]uint32{"z3": 0, "z1": 1, "z2": 1, "": 1}},
		{"a region without the client's zone", "r1", "z9", nil, map[string]uint32{"z1": 0, "z2": 0, "z3": 1, "": 1}},
		{"a region only", "r1", "", nil, map[string]uint32{"z1": 0, "z2": 0, "z3": 1, "": 1}},
		{"a zone only (no region)", "", "z1", nil, map[string]uint32{"z1": 0, "z2": 1, "z3": 1, "": 1}},
		{"no locality", "", "", nil, map[string]uint32{"z1": 0, "z2": 0, "z3": 0, "": 0}},
		{"own zone drained", "r1", "z1", []int{0}, map[string]uint32{"z1": 0, "z2": 0, "z3": 1, "": 1}},
		{"own region drained", "r1", "z1", []int{0, 1}, map[string]uint32{"z1": 0, "z2": 0, "z3": 0, "": 0}},
		{"own region's other zones drained", "r1", "z1", []int{1}, map[string]uint32{"z1": 0, "z2": 1, "z3": 1, "": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := append([]registry.Instance(nil), list...)
			for _, i := range tc.drain {
				l[i].Weight, l[i].Draining = 0, true
			}
			cla := assignment("greeter", l, view{region: tc.region, zone: tc.zone})
			prio, _ := localities(t, cla)
			for z, p := range tc.want {
				if prio[z] != p {
					t.Errorf("zone %q at priority %d, want %d (all: %v)", z, prio[z], p, prio)
				}
			}
			for _, loc := range cla.GetEndpoints() {
				want := map[string]string{"z1": "r1", "z2": "r1", "z3": "r2", "": ""}[loc.GetLocality().GetZone()]
				if loc.GetLocality().GetRegion() != want {
					t.Errorf("locality %v, want region %q", loc.GetLocality(), want)
				}
			}
		})
	}

	// A zone name matches only within the client's region, when both
	// name one; an instance without a region matches any.
	twins := []registry.Instance{instIn("a", "10.0.0.1:80", "r1", "z", 100), instIn("b", "10.0.0.2:80", "r2", "z", 100),
		instIn("c", "10.0.0.3:80", "", "z", 100)}
	cla := assignment("greeter", twins, view{region: "r2", zone: "z"})
	got := map[string]uint32{}
	for _, loc := range cla.GetEndpoints() {
		got[loc.GetLocality().GetRegion()] = loc.GetPriority()
	}
	if want := map[string]uint32{"r2": 0, "": 0, "r1": 1}; len(got) != 3 || got["r2"] != 0 || got[""] != 0 || got["r1"] != 1 {
		t.Errorf("zone z in r1, r2 and no region, client r2/z: priorities by region %v, want %v", got, want)
	}

	// Under RingHash each priority is one locality naming its regions.
	cla = assignment("greeter", list, view{region: "r1", zone: "z9", ringHash: true})
	if err := cla.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := len(cla.GetEndpoints()); n != 2 {
		t.Fatalf("ring hash: %d localities, want 2 (region r1, then the rest)", n)
	}
	if l := cla.GetEndpoints()[0].GetLocality(); l.GetRegion() != "r1" || l.GetZone() != "z1+z2" {
		t.Errorf("ring hash priority 0: locality %v, want region r1, zones z1+z2", l)
	}
	if l := cla.GetEndpoints()[1].GetLocality(); l.GetRegion() != "r2" || l.GetZone() != "+z3" {
		t.Errorf("ring hash priority 1: locality %v, want region r2, zones +z3", l)
	}
}
