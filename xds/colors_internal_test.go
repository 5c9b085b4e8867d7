package xds

import (
	"fmt"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/registry"
)

// withColor returns in with color c ("" for the base).
func withColor(in registry.Instance, c string) registry.Instance {
	in.Metadata = map[string]string{}
	if c != "" {
		in.Metadata["color"] = c
	}
	return in
}

// prioritiesOf returns "zone:color@priority" per locality of cla, the
// color read from its endpoints' instances (all of one color).
func prioritiesOf(t *testing.T, cla *endpointv3.ClusterLoadAssignment) []string {
	t.Helper()
	if err := cla.Validate(); err != nil {
		t.Fatalf("assignment does not validate: %v", err)
	}
	var out []string
	for _, l := range cla.GetEndpoints() {
		md := l.GetLbEndpoints()[0].GetMetadata().GetFilterMetadata()[MetadataKey]
		c := md.GetFields()["metadata"].GetStructValue().GetFields()["color"].GetStringValue()
		out = append(out, fmt.Sprintf("%s:%s@%d", l.GetLocality().GetZone(), c, l.GetPriority()))
	}
	return out
}

// A color's assignment lists its instances taking calls first, with the
// zone priorities, and the base after them, contiguous; the base's
// assignment has the base only; a service without colors has its one
// assignment, as before.
func TestColorAssignments(t *testing.T) {
	list := []registry.Instance{
		withColor(inst("a", "10.0.0.1:80", "z1", 100), ""),
		withColor(inst("b", "10.0.0.2:80", "z2", 100), ""),
		withColor(inst("c", "10.0.0.3:80", "z1", 100), "blue"),
		withColor(inst("d", "10.0.0.4:80", "z2", 100), "blue"),
		withColor(inst("e", "10.0.0.5:80", "z2", 0), "green"), // draining: green is the base alone
	}
	for _, tc := range []struct {
		zone              string
		base, blue, green string
	}{
		{"z1", "[z1:@0 z2:@1]", "[z1:blue@0 z2:blue@1 z1:@2 z2:@3]", "[z1:@0 z2:@1]"},
		{"", "[z1:@0 z2:@0]", "[z1:blue@0 z2:blue@0 z1:@1 z2:@1]", "[z1:@0 z2:@0]"},
	} {
		got := assignments("greeter", list, view{zone: tc.zone, metadata: true}, assignment) // the metadata names the colors
		if len(got) != 3 {
			t.Fatalf("zone %q: %d assignments, want 3 (base, blue, green)", tc.zone, len(got))
		}
		for name, want := range map[string]string{"greeter": tc.base, "greeter~blue": tc.blue, "greeter~green": tc.green} {
			if p := fmt.Sprint(prioritiesOf(t, got[name])); p != want {
				t.Errorf("zone %q: %s: %s, want %s", tc.zone, name, p, want)
			}
			if got[name].GetClusterName() != name {
				t.Errorf("assignment %s named %s", name, got[name].GetClusterName())
			}
		}
	}
	plain := []registry.Instance{withColor(inst("a", "10.0.0.1:80", "z1", 100), ""), withColor(inst("b", "10.0.0.2:80", "z2", 100), "")}
	got := assignments("greeter", plain, view{zone: "z1"}, assignment)
	if len(got) != 1 || !proto.Equal(got["greeter"], assignment("greeter", plain, view{zone: "z1"})) {
		t.Errorf("a service without colors: %v, want its one assignment as before", got)
	}
}

// Routes: without colors, routeFor's; with colors, a header route per
// color before the default; under a canary, a route of other colors to
// the base and weighted clusters for the rest; a canary of a color
// without instances, or of 0%, changes nothing.
func TestColorRoutes(t *testing.T) {
	if r := routeWithColors("greeter", coloring{}); !proto.Equal(r, routeFor("greeter")) {
		t.Errorf("no colors: %v, want routeFor's", r)
	}
	describe := func(co coloring) []string {
		var out []string
		for _, rt := range routeWithColors("greeter", co).GetVirtualHosts()[0].GetRoutes() {
			m := "*"
			if h := rt.GetMatch().GetHeaders(); len(h) > 0 {
				//lint:ignore SA1019 what Muster sends (colors.go)
				m = h[0].GetName() + "=" + h[0].GetExactMatch()
				if h[0].GetPresentMatch() {
					m = h[0].GetName() + " present"
				}
			}
			a := rt.GetRoute().GetCluster()
			for _, wc := range rt.GetRoute().GetWeightedClusters().GetClusters() {
				a += fmt.Sprintf("%s:%d ", wc.GetName(), wc.GetWeight().GetValue())
			}
			//lint:ignore SA1019 what older clients read
			if tw := rt.GetRoute().GetWeightedClusters().GetTotalWeight(); tw != nil {
				a += fmt.Sprintf("/%d", tw.GetValue())
			}
			out = append(out, m+" -> "+a)
		}
		return out
	}
	colors := []string{"blue", "green"}
	for _, tc := range []struct {
		co   coloring
		want string
	}{
		{coloring{colors: colors}, "[x-muster-color=blue -> greeter~blue x-muster-color=green -> greeter~green * -> greeter]"},
		{coloring{colors: colors, canary: registry.Canary{Color: "blue", Percent: 5.5}},
			"[x-muster-color=blue -> greeter~blue x-muster-color=green -> greeter~green x-muster-color present -> greeter * -> greeter:9450 greeter~blue:550 /10000]"},
		{coloring{colors: colors, canary: registry.Canary{Color: "red", Percent: 5}}, "[x-muster-color=blue -> greeter~blue x-muster-color=green -> greeter~green * -> greeter]"},
		{coloring{colors: colors, canary: registry.Canary{Color: "blue", Percent: 0}}, "[x-muster-color=blue -> greeter~blue x-muster-color=green -> greeter~green * -> greeter]"},
	} {
		if got := fmt.Sprint(describe(tc.co)); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.co, got, tc.want)
		}
	}
	if !(coloring{colors: colors, canary: registry.Canary{Color: "red", Percent: 5}}).equal(coloring{colors: colors}) {
		t.Error("a canary of a color without instances changes the routes")
	}
}
