package xds

import (
	"encoding/json"
	"fmt"
	"maps"
	"testing"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	"google.golang.org/grpc/balancer"
	"google.golang.org/protobuf/proto"

	_ "github.com/musterhq/muster/balancer/p2c" // registers muster_p2c
	_ "github.com/musterhq/muster/balancer/wrr" // registers muster_wrr
	"github.com/musterhq/muster/registry"
)

// The table lists the instances taking calls at a weight other than the
// default, by the address the client's endpoint will have (usable makes it
// canonical).
func TestWeightTable(t *testing.T) {
	list := []registry.Instance{
		inst("a", "10.0.0.1:80", "z1", 100),          // default: left out
		inst("b", "10.0.0.2:80", "z1", 0),            // draining: left out
		inst("c", "[::ffff:10.0.0.3]:80", "z2", 300), // unmapped, as sent in EDS
		inst("d", "[0:0::1]:81", "", 1),              // compressed
		inst("e", "10.0.0.9:82", "", 10000),
		{Name: "greeter", ID: "f", Addr: "10.0.0.6:80"}, // weight 0: the default
	}
	ok, bad := usable(list)
	if len(bad) != 0 {
		t.Fatalf("skipped %v", bad)
	}
	want := map[string]int{"10.0.0.3:80": 300, "[::1]:81": 1, "10.0.0.9:82": 10000}
	if got := weightTable(ok); !maps.Equal(got, want) {
		t.Errorf("weightTable = %v, want %v", got, want)
	}
	if got := weightTable(list[:2]); got != nil {
		t.Errorf("weightTable of default and draining instances = %v, want nil", got)
	}
}

// balancerConfig returns the JSON config a gRPC client gives the first
// policy of c's load_balancing_policy: its TypedStruct's struct, marshalled
// as grpc-go does (encoding/json on the structpb.Struct).
func balancerConfig(t *testing.T, p LBPolicy, mc musterConfig) (string, json.RawMessage) {
	t.Helper()
	c := clusterFor("greeter", p, mc)
	if err := c.Validate(); err != nil {
		t.Fatalf("%s: cluster does not validate: %v", p, err)
	}
	var ts xdstypev3.TypedStruct
	if err := c.GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&ts); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(ts.GetValue())
	if err != nil {
		t.Fatal(err)
	}
	return ts.GetTypeUrl(), js
}

// The config written for Muster's policies is accepted by their balancers;
// other custom policies get an empty config.
func TestClusterCarriesWeights(t *testing.T) {
	table := map[string]int{"10.0.0.3:80": 300, "[::1]:81": 1, "backend.example:82": registry.MaxWeight}
	for _, p := range []LBPolicy{MusterP2C, MusterWRR} {
		_, js := balancerConfig(t, p, musterConfig{weights: table})
		var got struct {
			EndpointWeights map[string]int `json:"endpointWeights"`
		}
		if err := json.Unmarshal(js, &got); err != nil || !maps.Equal(got.EndpointWeights, table) {
			t.Errorf("%s: config %s (%v), want endpointWeights %v", p, js, err, table)
		}
		parser := balancer.Get(string(p)).(balancer.ConfigParser)
		if _, err := parser.ParseConfig(js); err != nil {
			t.Errorf("%s rejects the config the control plane writes, %s: %v", p, js, err)
		}
		if _, js := balancerConfig(t, p, musterConfig{}); string(js) != "{}" {
			t.Errorf("%s without a table: config %s, want {}", p, js)
		}
	}
	if _, js := balancerConfig(t, CustomLBPolicy("other_lb"), musterConfig{weights: table}); string(js) != "{}" {
		t.Errorf("a custom policy not Muster's: config %s, want {} (its balancer may not know the field)", js)
	}
}

// weightedList returns n instances, every one with a weight other than the
// default (the table's worst case).
func weightedList(n int) []registry.Instance {
	list := make([]registry.Instance, n)
	for i := range list {
		list[i] = inst(fmt.Sprint("i", i), fmt.Sprintf("10.%d.%d.%d:9000", i/65536, i/256%256, i%256), "", 101+i%9900)
	}
	return list
}

// The Cluster's size at 1,000 instances with weights other than the
// default, for docs/XDS.md.
func TestClusterSizeAt1000Instances(t *testing.T) {
	const n = 1000
	list := weightedList(n)
	table := weightTable(list)
	if len(table) != n {
		t.Fatalf("table of %d entries, want %d", len(table), n)
	}
	empty := proto.Size(clusterFor("greeter", MusterWRR, musterConfig{}))
	full := proto.Size(clusterFor("greeter", MusterWRR, musterConfig{weights: table}))
	_, js := balancerConfig(t, MusterWRR, musterConfig{weights: table})
	t.Logf("Cluster: %d bytes without a table, %d bytes with %d entries (%.1f bytes per entry); balancer JSON config %d bytes; "+
		"the same instances' ClusterLoadAssignment: %d bytes", empty, full, n, float64(full-empty)/n, len(js), proto.Size(assignment("greeter", list, view{})))
	if per := (full - empty) / n; per > 40 {
		t.Errorf("%d bytes per table entry, want at most 40 (an IPv4 host:port, a double, framing)", per)
	}
}

// What a change of a muster_p2c/muster_wrr service costs the control plane
// for the table at 1,000 weighted instances: the table on every change,
// and the Cluster built and marshalled when the table changed.
func BenchmarkWeightTable1000(b *testing.B) {
	list := weightedList(1000)
	b.Run("table", func(b *testing.B) {
		for b.Loop() {
			_ = weightTable(list)
		}
	})
	table := weightTable(list)
	b.Run("cluster+marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := proto.Marshal(clusterFor("greeter", MusterWRR, musterConfig{weights: table})); err != nil {
				b.Fatal(err)
			}
		}
	})
}
