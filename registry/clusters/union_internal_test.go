package clusters

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

func inst(id, addr, region string) *registry.Instance {
	return &registry.Instance{Name: "user", ID: id, Addr: addr, Region: region, Metadata: map[string]string{"k": "v"}}
}

func testUnion() *union {
	return newUnion("user", []Cluster{{Name: "eu", Region: "eu-1"}, {Name: "us", Region: "us-1"}}, time.Unix(1000, 0))
}

func TestUnionTagsKeepsPointersAndKeepsSameIDsApart(t *testing.T) {
	u := testUnion()
	eu := []*registry.Instance{inst("a", "10.0.0.1:1", ""), inst("b", "10.0.0.2:1", "eu-2")}
	us := []*registry.Instance{inst("a", "10.1.0.1:1", "")}
	s := u.merge([]registry.Snapshot{{Loaded: true, Revision: 5, Generation: 1, Instances: eu}, {Loaded: true, Revision: 7, Generation: 1, Instances: us}})
	if !s.Loaded || s.Stale() || s.Err != nil || s.Revision != 12 || s.Generation == 0 {
		t.Fatalf("state: loaded %v stale %v err %v rev %d gen %d", s.Loaded, s.Stale(), s.Err, s.Revision, s.Generation)
	}
	want := []struct{ id, cluster, region string }{{"a", "eu", "eu-1"}, {"a", "us", "us-1"}, {"b", "eu", "eu-2"}}
	if len(s.Instances) != len(want) {
		t.Fatalf("%d instances, want %d: an ID in two clusters is two instances", len(s.Instances), len(want))
	}
	for i, w := range want {
		in := s.Instances[i]
		if in.ID != w.id || registry.ClusterOf(in) != w.cluster || in.Region != w.region || in.Metadata["k"] != "v" {
			t.Fatalf("instance %d = %s in %s, region %q; want %s in %s, region %q", i, in.ID, registry.ClusterOf(in), in.Region, w.id, w.cluster, w.region)
		}
	}
	if eu[0].Metadata[registry.ClusterKey] != "" || eu[0].Region != "" {
		t.Fatal("the cluster's own instance was changed")
	}
	if len(s.Clusters) != 2 || s.Clusters[0].Cluster != "eu" || len(s.Clusters[0].Instances) != 2 || s.Clusters[1].Instances[0] != s.Instances[1] {
		t.Fatalf("parts: %+v", s.Clusters)
	}
	// us changes; eu's copies keep their pointers, and so does us's
	// unchanged instance.
	us2 := []*registry.Instance{us[0], inst("c", "10.1.0.3:1", "")}
	s2 := u.merge([]registry.Snapshot{{Loaded: true, Revision: 5, Generation: 1, Instances: eu}, {Loaded: true, Revision: 8, Generation: 1, Instances: us2}})
	if s2.Instances[0] != s.Instances[0] || s2.Instances[1] != s.Instances[1] || s2.Instances[2] != s.Instances[2] || len(s2.Instances) != 4 {
		t.Fatal("unchanged instances did not keep their pointers")
	}
	if sameUnion(s, s2) {
		t.Fatal("sameUnion reports two different unions the same")
	}
	s3 := u.merge([]registry.Snapshot{{Loaded: true, Revision: 5, Generation: 1, Instances: eu}, {Loaded: true, Revision: 8, Generation: 1, Instances: us2}})
	if !sameUnion(s2, s3) {
		t.Fatal("the same parts merged twice differ")
	}
}

func TestUnionLoadedAndStalePerCluster(t *testing.T) {
	u := testUnion()
	t0 := time.Unix(1000, 0)
	// Nothing answered: not loaded, stale since the start (nothing known).
	s := u.merge([]registry.Snapshot{{}, {}})
	if s.Loaded || !s.StaleSince.Equal(t0) {
		t.Fatalf("nothing answered: loaded %v, stale since %v", s.Loaded, s.StaleSince)
	}
	// eu answered, us not yet: loaded (us does not hold eu back), stale
	// since the start, us's part not loaded.
	eu := []*registry.Instance{inst("a", "10.0.0.1:1", "")}
	s = u.merge([]registry.Snapshot{{Loaded: true, Instances: eu}, {}})
	if !s.Loaded || !s.StaleSince.Equal(t0) || s.Clusters[0].Stale() || s.Clusters[1].Loaded || len(s.Instances) != 1 {
		t.Fatalf("eu only: loaded %v, stale since %v, parts %+v", s.Loaded, s.StaleSince, s.Clusters)
	}
	// us unreachable after a load: its part is stale with its instances,
	// eu's fresh.
	down := errors.New("no answer")
	t1 := t0.Add(time.Minute)
	us := []*registry.Instance{inst("b", "10.1.0.1:1", "")}
	s = u.merge([]registry.Snapshot{{Loaded: true, Instances: eu}, {Loaded: true, StaleSince: t1, Err: down, Instances: us}})
	if !s.StaleSince.Equal(t1) || s.Clusters[0].Stale() || !s.Clusters[1].Stale() || !errors.Is(s.Err, down) || len(s.Instances) != 2 {
		t.Fatalf("us stale: stale since %v, err %v, parts %+v", s.StaleSince, s.Err, s.Clusters)
	}
	s = u.merge([]registry.Snapshot{{Loaded: true, Instances: eu}, {Loaded: true, Instances: us}})
	if s.Stale() || s.Err != nil {
		t.Fatalf("both fresh: stale since %v, err %v", s.StaleSince, s.Err)
	}
}

// The parts' deliberate departures are the union's: nil while no part
// records any, the parts' IDs otherwise, at most registry.MaxRetired (the
// last ones), in a slice of the union's own.
func TestUnionRetired(t *testing.T) {
	u := testUnion()
	eu := []*registry.Instance{inst("a", "10.0.0.1:1", "")}
	if s := u.merge([]registry.Snapshot{{Loaded: true, Instances: eu}, {Loaded: true}}); s.Retired != nil {
		t.Fatalf("no part records departures: Retired %v, want nil", s.Retired)
	}
	s := u.merge([]registry.Snapshot{{Loaded: true, Instances: eu, Retired: []string{}}, {Loaded: true}})
	if s.Retired == nil || len(s.Retired) != 0 {
		t.Fatalf("a part records departures, none yet: Retired %v, want empty, not nil", s.Retired)
	}
	usRetired := []string{"c"}
	s = u.merge([]registry.Snapshot{{Loaded: true, Instances: eu, Retired: []string{"b"}}, {Loaded: true, Retired: usRetired}})
	if !slices.Equal(s.Retired, []string{"b", "c"}) {
		t.Fatalf("Retired %v, want [b c]", s.Retired)
	}
	s.Retired[1] = "x"
	if usRetired[0] != "c" {
		t.Fatal("the union's Retired shares a part's slice")
	}
	many := make([]string, registry.MaxRetired)
	for i := range many {
		many[i] = fmt.Sprint("m", i)
	}
	s = u.merge([]registry.Snapshot{{Loaded: true, Retired: []string{"b"}}, {Loaded: true, Retired: many}})
	if len(s.Retired) != registry.MaxRetired || s.Retired[0] != "m0" {
		t.Fatalf("%d retired, first %q; want the last %d", len(s.Retired), s.Retired[0], registry.MaxRetired)
	}
}

func TestNewRejectsBadClusters(t *testing.T) {
	d := &Discovery{}
	for _, tc := range []struct {
		name     string
		clusters []Cluster
		want     string
	}{
		{"none", nil, "no cluster"},
		{"empty name", []Cluster{{Name: "", Discovery: d}}, "empty cluster name"},
		{"bad name", []Cluster{{Name: "eu west", Discovery: d}}, `"eu west"`},
		{"twice", []Cluster{{Name: "eu", Discovery: d}, {Name: "eu", Discovery: d}}, `"eu" used twice`},
		{"nil discovery", []Cluster{{Name: "eu"}}, `"eu": nil Discovery`},
		{"bad region", []Cluster{{Name: "eu", Region: "eu 1", Discovery: d}}, `region "eu 1"`},
	} {
		_, err := New(tc.clusters...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
