package xds

import (
	"math"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/registry"
)

// The resources of a service with colors and a canary, under each policy,
// use only the forms every client at the support floor accepts
// (docs/XDS.md, "Clients"): exact_match header matchers (the C-core before
// 1.56 rejects string_match), weighted clusters with an explicit total equal
// to their sum (older C-core and grpc-go assume 100; grpc-js-xds before
// 1.14.1 draws over the total), lb_policy ROUND_ROBIN only (grpc-js and the
// C-core reject LEAST_REQUEST; the C-core 1.51 crashes on RING_HASH), a
// ring_hash config without ring sizes (grpc-js rejects those), and for ring
// hash a hash policy on every route.
func TestResourcesUsePortableForms(t *testing.T) {
	co := coloring{colors: []string{"blue"}, canary: registry.Canary{Color: "blue", Percent: 12.5}}
	for _, p := range []LBPolicy{RoundRobin, RingHash, LeastRequest, MusterP2C, MusterWRR} {
		co.hash = p == RingHash
		r := routeWithColors("greeter", co)
		if err := r.Validate(); err != nil {
			t.Fatalf("%s: route: %v", p, err)
		}
		weighted := 0
		for _, rt := range r.GetVirtualHosts()[0].GetRoutes() {
			for _, h := range rt.GetMatch().GetHeaders() {
				if _, ok := h.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_StringMatch); ok {
					t.Errorf("%s: route %v matches a header by string_match", p, rt.GetMatch())
				}
			}
			a := rt.GetRoute()
			if wc := a.GetWeightedClusters(); wc != nil {
				weighted++
				var sum uint32
				for _, c := range wc.GetClusters() {
					sum += c.GetWeight().GetValue()
				}
				//lint:ignore SA1019 what older clients read
				if tw := wc.GetTotalWeight(); tw == nil || tw.GetValue() != sum {
					t.Errorf("%s: weighted clusters sum to %d with total_weight %v, want the sum stated", p, sum, tw)
				}
			}
			hp := a.GetHashPolicy()
			if !co.hash {
				if len(hp) != 0 {
					t.Errorf("%s: route with hash policy %v", p, hp)
				}
				continue
			}
			if len(hp) != 2 || hp[0].GetHeader().GetHeaderName() != color.KeyHeader || !hp[0].GetTerminal() ||
				hp[1].GetFilterState().GetKey() != "io.grpc.channel_id" {
				t.Errorf("%s: hash policy %v, want header %s (terminal) then the channel", p, hp, color.KeyHeader)
			}
		}
		if weighted != 1 {
			t.Errorf("%s: %d routes with weighted clusters, want 1 (the canary)", p, weighted)
		}
		c := clusterFor("greeter", p, musterConfig{})
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: cluster: %v", p, err)
		}
		if lb := c.GetLbPolicy(); lb != clusterv3.Cluster_ROUND_ROBIN || c.GetLbConfig() != nil {
			t.Errorf("%s: lb_policy %v (config %v), want ROUND_ROBIN", p, lb, c.GetLbConfig())
		}
		for _, pol := range c.GetLoadBalancingPolicy().GetPolicies() {
			var rh ringhashv3.RingHash
			if pol.GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&rh) != nil {
				continue
			}
			if rh.GetHashFunction() != ringhashv3.RingHash_XX_HASH || rh.GetMinimumRingSize() != nil || rh.GetMaximumRingSize() != nil {
				t.Errorf("%s: ring_hash config %v, want xxHash and no ring sizes", p, &rh)
			}
		}
		if pols := c.GetLoadBalancingPolicy().GetPolicies(); len(pols) > 0 &&
			pols[len(pols)-1].GetTypedExtensionConfig().GetName() != "envoy.load_balancing_policies.wrr_locality" {
			t.Errorf("%s: load_balancing_policy does not end in round robin: %v", p, pols)
		}
	}
}

// shareByProduct returns each endpoint's share of a priority's ring as
// clients that multiply locality and endpoint weights give it (gRFC A42:
// grpc-java, the C-core, grpc-js, grpc-go 1.60), and shareByNormalised as
// grpc-go 1.85 does (each normalised first, gRFC A113), by address.
func ringShares(cla *endpointv3.ClusterLoadAssignment, prio uint32, normalise bool) map[string]float64 {
	weights := map[string]float64{}
	var locTotal float64
	for _, loc := range cla.GetEndpoints() {
		if loc.GetPriority() == prio {
			locTotal += float64(loc.GetLoadBalancingWeight().GetValue())
		}
	}
	var total float64
	for _, loc := range cla.GetEndpoints() {
		if loc.GetPriority() != prio {
			continue
		}
		lw := float64(loc.GetLoadBalancingWeight().GetValue())
		var inLoc float64
		for _, e := range loc.GetLbEndpoints() {
			inLoc += float64(e.GetLoadBalancingWeight().GetValue())
		}
		for _, e := range loc.GetLbEndpoints() {
			w := lw * float64(e.GetLoadBalancingWeight().GetValue())
			if normalise {
				w = lw / locTotal * float64(e.GetLoadBalancingWeight().GetValue()) / inLoc
			}
			weights[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = w
			total += w
		}
	}
	for a, w := range weights {
		weights[a] = w / total
	}
	return weights
}

// Under RingHash an endpoint's share of the ring is its weight's share in
// every client: zone 1 {a:100}, zone 2 {b:100, c:200} gives a 25 %, b 25 %,
// c 50 % whether a client multiplies locality by endpoint weight or
// normalises both (with a locality per zone, the product gives a 1/7,
// 2/7, 4/7; the normalised form 1/2, 1/6, 1/3). A client in zone 1 has a
// at priority 0 and b and c at priority 1, in their weights' proportion.
func TestRingHashSharesAgreeAcrossClients(t *testing.T) {
	list := []registry.Instance{
		inst("a", "10.0.0.1:80", "z1", 100), inst("b", "10.0.0.2:80", "z2", 100), inst("c", "10.0.0.3:80", "z2", 200),
	}
	for _, tc := range []struct {
		zone string
		prio uint32
		want map[string]float64
	}{
		{"", 0, map[string]float64{"10.0.0.1": 0.25, "10.0.0.2": 0.25, "10.0.0.3": 0.5}},
		{"z1", 0, map[string]float64{"10.0.0.1": 1}},
		{"z1", 1, map[string]float64{"10.0.0.2": 1.0 / 3, "10.0.0.3": 2.0 / 3}},
	} {
		cla := assignment("greeter", list, view{zone: tc.zone, ringHash: true})
		if err := cla.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, normalise := range []bool{false, true} {
			got := ringShares(cla, tc.prio, normalise)
			for a, w := range tc.want {
				if math.Abs(got[a]-w) > 1e-9 || len(got) != len(tc.want) {
					t.Errorf("client zone %q, priority %d, normalised %v: shares %v, want %v", tc.zone, tc.prio, normalise, got, tc.want)
					break
				}
			}
		}
		for _, loc := range cla.GetEndpoints() {
			if w := loc.GetLoadBalancingWeight().GetValue(); w != 1 {
				t.Errorf("client zone %q: locality %v has weight %d, want 1 (the product cannot overflow)", tc.zone, loc.GetLocality(), w)
			}
		}
	}
	// Other policies keep a locality per zone, weighted by its instances.
	if cla := assignment("greeter", list, view{}); len(cla.GetEndpoints()) != 2 {
		t.Errorf("round robin: %d localities, want one per zone", len(cla.GetEndpoints()))
	}
}
