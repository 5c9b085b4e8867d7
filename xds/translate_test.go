package xds

import (
	"strings"
	"testing"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"

	"github.com/musterhq/muster/registry"
)

func TestListener(t *testing.T) {
	l, err := listenerFor("greeter")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(); err != nil {
		t.Fatalf("listener does not validate: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := l.GetApiListener().GetApiListener().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	rds := hcm.GetRds()
	if rds.GetRouteConfigName() != "greeter" || rds.GetConfigSource().GetAds() == nil {
		t.Errorf("RDS = %v, want route config greeter over ADS", rds)
	}
	fs := hcm.GetHttpFilters()
	if len(fs) == 0 || fs[len(fs)-1].GetName() != routerFilterName {
		t.Errorf("http filters %v: want a non-empty list ending in the router", fs)
	}
}

func TestRoute(t *testing.T) {
	r := routeFor("greeter")
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	vh := r.GetVirtualHosts()
	if r.GetName() != "greeter" || len(vh) != 1 || vh[0].GetDomains()[0] != "*" {
		t.Fatalf("route %v", r)
	}
	rt := vh[0].GetRoutes()[0]
	if rt.GetMatch().GetPrefix() != "/" || rt.GetRoute().GetCluster() != "greeter" {
		t.Errorf("route %v: want prefix / to cluster greeter", rt)
	}
}

func TestCluster(t *testing.T) {
	for _, tc := range []struct {
		p    LBPolicy
		want clusterv3.Cluster_LbPolicy
	}{
		{RoundRobin, clusterv3.Cluster_ROUND_ROBIN},
		{RingHash, clusterv3.Cluster_ROUND_ROBIN},     // for clients that read lb_policy only; load_balancing_policy names ring_hash
		{LeastRequest, clusterv3.Cluster_ROUND_ROBIN}, // for clients that read lb_policy only; load_balancing_policy names least_request
		{MusterP2C, clusterv3.Cluster_ROUND_ROBIN},    // ignored by clients: load_balancing_policy wins
	} {
		c := clusterFor("greeter", tc.p, musterConfig{})
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.p, err)
		}
		if c.GetType() != clusterv3.Cluster_EDS || c.GetEdsClusterConfig().GetServiceName() != "greeter" ||
			c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			t.Errorf("%s: cluster %v: want EDS over ADS for greeter", tc.p, c)
		}
		if c.GetLbPolicy() != tc.want {
			t.Errorf("%s: lb policy %v, want %v", tc.p, c.GetLbPolicy(), tc.want)
		}
	}
	for _, p := range []LBPolicy{RoundRobin} {
		if lbp := clusterFor("greeter", p, musterConfig{}).GetLoadBalancingPolicy(); lbp != nil {
			t.Errorf("%s: load_balancing_policy %v, want none", p, lbp)
		}
	}
	// A custom policy: the TypedStruct naming the balancer, then
	// wrr_locality over round_robin for the clients without it.
	pols := clusterFor("greeter", MusterWRR, musterConfig{}).GetLoadBalancingPolicy().GetPolicies()
	if len(pols) != 2 {
		t.Fatalf("muster_wrr: %d policies, want 2", len(pols))
	}
	var ts xdstypev3.TypedStruct
	if err := pols[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&ts); err != nil {
		t.Fatalf("muster_wrr: first policy is not a TypedStruct: %v", err)
	}
	if ts.GetTypeUrl() != "type.googleapis.com/muster_wrr" {
		t.Errorf("TypedStruct type URL %q, want one ending in /muster_wrr", ts.GetTypeUrl())
	}
	var wl wrrlocalityv3.WrrLocality
	if err := pols[1].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&wl); err != nil {
		t.Fatalf("muster_wrr: second policy is not wrr_locality: %v", err)
	}
	for _, p := range []LBPolicy{"", "Muster", "a b", LBPolicy(strings.Repeat("a", 65))} {
		if p.valid() {
			t.Errorf("policy %q is valid", p)
		}
	}
}

func inst(id, addr, zone string, weight int) registry.Instance {
	in := registry.Instance{Name: "greeter", ID: id, Addr: addr, Zone: zone, Weight: weight, Version: "v1",
		Metadata: map[string]string{"color": "blue"}}
	if weight == 0 {
		in.Draining = true
	}
	return in
}

// priorities maps zone → priority and zone → locality weight.
func localities(t *testing.T, cla *endpointv3.ClusterLoadAssignment) (map[string]uint32, map[string]uint32) {
	t.Helper()
	if err := cla.Validate(); err != nil {
		t.Fatalf("assignment does not validate: %v", err)
	}
	prio, weight := map[string]uint32{}, map[string]uint32{}
	for _, l := range cla.GetEndpoints() {
		z := l.GetLocality().GetZone()
		if _, dup := prio[z]; dup {
			t.Fatalf("zone %q in two localities", z)
		}
		prio[z], weight[z] = l.GetPriority(), l.GetLoadBalancingWeight().GetValue()
	}
	return prio, weight
}

func TestAssignmentPriorities(t *testing.T) {
	list := []registry.Instance{
		inst("a", "10.0.0.1:80", "z1", 100),
		inst("b", "10.0.0.2:80", "z2", 100),
		inst("c", "10.0.0.3:80", "z2", 200),
		inst("d", "10.0.0.4:80", "", 50),
	}
	for _, tc := range []struct {
		client string
		want   map[string]uint32
	}{
		{"z1", map[string]uint32{"z1": 0, "z2": 1, "": 1}},
		{"z2", map[string]uint32{"z1": 1, "z2": 0, "": 1}},
		{"", map[string]uint32{"z1": 0, "z2": 0, "": 0}},
		{"z9", map[string]uint32{"z1": 0, "z2": 0, "": 0}}, // no instance in the client's zone
	} {
		prio, weight := localities(t, assignment("greeter", list, view{zone: tc.client}))
		for z, p := range tc.want {
			if prio[z] != p {
				t.Errorf("client zone %q: zone %q priority %d, want %d", tc.client, z, prio[z], p)
			}
		}
		if weight["z1"] != 100 || weight["z2"] != 300 || weight[""] != 50 {
			t.Errorf("locality weights %v, want z1 100, z2 300, \"\" 50", weight)
		}
	}

	// A zone whose only instance drains is no longer the client's
	// preference: every zone moves to priority 0 (failover).
	list[0] = inst("a", "10.0.0.1:80", "z1", 0)
	prio, weight := localities(t, assignment("greeter", list, view{zone: "z1"}))
	if prio["z1"] != 0 || prio["z2"] != 0 || prio[""] != 0 {
		t.Errorf("zone z1 draining: priorities %v, want all 0", prio)
	}
	if weight["z1"] != 1 {
		t.Errorf("locality of drained instances has weight %d, want 1 (0 is ignored by clients)", weight["z1"])
	}
}

func TestAssignmentEndpoints(t *testing.T) {
	list := []registry.Instance{
		inst("a", "10.0.0.1:80", "z1", 100),
		inst("b", "[::1]:81", "z1", 0),
		inst("c", "10.0.0.9:82", "z1", 300),
	}
	for _, ep := range assignment("greeter", list, view{}).GetEndpoints()[0].GetLbEndpoints() {
		if ep.GetMetadata() != nil {
			t.Errorf("without WithEndpointMetadata, endpoint metadata %v", ep.GetMetadata())
		}
	}
	cla := assignment("greeter", list, view{metadata: true})
	if cla.GetClusterName() != "greeter" {
		t.Errorf("cluster name %q", cla.GetClusterName())
	}
	eps := cla.GetEndpoints()[0].GetLbEndpoints()
	type want struct {
		host   string
		port   uint32
		weight uint32
		health corev3.HealthStatus
	}
	wants := []want{
		{"10.0.0.1", 80, 100, corev3.HealthStatus_HEALTHY},
		{"::1", 81, 1, corev3.HealthStatus_DRAINING},
		{"10.0.0.9", 82, 300, corev3.HealthStatus_HEALTHY},
	}
	for i, w := range wants {
		ep := eps[i]
		sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
		if sa.GetAddress() != w.host || sa.GetPortValue() != w.port || ep.GetLoadBalancingWeight().GetValue() != w.weight ||
			ep.GetHealthStatus() != w.health {
			t.Errorf("endpoint %d = %s:%d weight %d %v, want %+v", i, sa.GetAddress(), sa.GetPortValue(),
				ep.GetLoadBalancingWeight().GetValue(), ep.GetHealthStatus(), w)
		}
		md := ep.GetMetadata().GetFilterMetadata()[MetadataKey].GetFields()
		if md["id"].GetStringValue() != list[i].ID || md["version"].GetStringValue() != "v1" ||
			md["zone"].GetStringValue() != "z1" ||
			md["metadata"].GetStructValue().GetFields()["color"].GetStringValue() != "blue" {
			t.Errorf("endpoint %d metadata %v", i, md)
		}
		if got := md["weight"].GetNumberValue(); got != float64(list[i].EffectiveWeight()) {
			t.Errorf("endpoint %d metadata weight %v, want %d", i, got, list[i].EffectiveWeight())
		}
	}
}

// usable is prepare and withoutDuplicates over list, as the feed applies
// them.
func usable(list []registry.Instance) ([]registry.Instance, []skipped) {
	prepared := make([]*preparedInstance, len(list))
	for i, in := range list {
		prepared[i] = prepare(in)
	}
	return withoutDuplicates(prepared)
}

func TestUsable(t *testing.T) {
	list := []registry.Instance{
		inst("a", "10.0.0.1:80", "", 100),
		inst("b", "10.0.0.1:80", "", 100),          // duplicate of a
		inst("c", "[::ffff:10.0.0.1]:80", "", 100), // the same address, IPv4-mapped
		inst("d", "[::1]:80", "", 100),
		inst("e", "[0:0::1]:80", "", 100), // the same as d
		inst("f", "host_name:80", "", 100),
		inst("g", "10.0.0.2:0", "", 100),
		inst("h", "10.0.0.2", "", 100),
		inst("i", "-bad.example:80", "", 100),
		inst("j", "good.example:80", "", 100), // a DNS name: grpc-js takes IP addresses only
		inst("k", "[fe80::1%eth0]:80", "", 100),
	}
	for _, c := range []string{"grün", " blue", "blue ", "a\tb"} {
		in := inst("l-"+c, "10.0.0.3:80", "", 100)
		in.Metadata = map[string]string{"color": c}
		list = append(list, in)
	}
	ok, bad := usable(list)
	var ids []string
	for _, in := range ok {
		ids = append(ids, in.ID)
	}
	if got := strings.Join(ids, ","); got != "a,d" {
		t.Errorf("usable = %s, want a,d (no color a client cannot send)", got)
	}
	reasons := map[string]string{}
	for _, b := range bad {
		reasons[b.ID] = b.Reason
	}
	for _, id := range []string{"b", "c", "e", "f", "g", "h", "i", "j", "k"} {
		if reasons[id] == "" {
			t.Errorf("instance %s not reported as skipped (skipped: %v)", id, bad)
		}
	}
	if !strings.Contains(reasons["b"], `"a"`) || !strings.Contains(reasons["e"], `"d"`) {
		t.Errorf("duplicate reasons do not name the first instance: %v", reasons)
	}
	// What is published is valid for the client: no duplicate addresses.
	cla := assignment("greeter", ok, view{})
	seen := map[string]bool{}
	for _, ep := range cla.GetEndpoints()[0].GetLbEndpoints() {
		a := ep.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
		if seen[a] {
			t.Errorf("address %s published twice", a)
		}
		seen[a] = true
	}
}
