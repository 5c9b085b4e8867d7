package clusters_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "github.com/musterhq/muster/balancer/wrr" // registers muster_wrr
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

func dial(t *testing.T, b *resolver.Builder, lb string) *grpc.ClientConn {
	t.Helper()
	return dialTarget(t, b, lb, "muster:///user")
}

func dialTarget(t *testing.T, b *resolver.Builder, lb, target string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithResolvers(b),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+lb+`":{}}]}`), grpc.WithDisableServiceConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Two regions, each its own etcd cluster, a backend in each under the
// same ID: the union holds both, tagged with their cluster and region; a
// client in eu calls eu's backend first and the other region's once eu's
// fails; a target naming a cluster calls that cluster's only.
func TestTwoRegionsOwnRegionFirst(t *testing.T) {
	eu, us := startRegion(t, "eu", regionSetup{}), startRegion(t, "us", regionSetup{})
	beEU, beUS := testbackend.Start(t), testbackend.Start(t)
	eu.register(t, "user-1", beEU.Addr)
	us.register(t, "user-1", beUS.Addr)
	d := newUnion(t, eu, us)
	s := registrytest.WaitFor(t, watch(t, d), "both clusters' user-1", func(s registry.Snapshot) bool {
		return s.Loaded && len(s.Instances) == 2
	})
	for i, want := range []struct{ cluster, addr string }{{"eu", beEU.Addr}, {"us", beUS.Addr}} {
		in := s.Instances[i]
		if in.ID != "user-1" || registry.ClusterOf(in) != want.cluster || in.Region != want.cluster || in.Addr != want.addr {
			t.Fatalf("instance %d: %s in cluster %q region %q at %s; want user-1 in %s at %s",
				i, in.ID, registry.ClusterOf(in), in.Region, in.Addr, want.cluster, want.addr)
		}
	}
	conn := dial(t, newBuilder(d, resolver.WithRegion("eu")), "muster_wrr")
	callUntil := func(what string, addr string) {
		testbackend.CallUntil(t, conn, 10*time.Second, what, testbackend.HasAll(addr))
	}
	callUntil("calling eu", beEU.Addr)
	if got := testbackend.Calls(t, conn, 50); got[beEU.Addr] != 50 {
		t.Fatalf("a client in eu called %v; want its own region's backend only while it is healthy", got)
	}
	// A target can keep to one cluster by its metadata.
	onlyUS := dialTarget(t, newBuilder(d, resolver.WithRegion("eu")), "muster_wrr", "muster:///user?meta.muster.cluster=us")
	if got := testbackend.Calls(t, onlyUS, 20); got[beUS.Addr] != 20 {
		t.Fatalf("a target with meta.muster.cluster=us called %v; want us's backend only", got)
	}
	beEU.Stop()
	callUntil("calling us once eu's backend is down", beUS.Addr)
}

// One cluster's member frozen (SIGSTOP) for 30 s: its instances stay
// listed, marked stale in its part, and are called; the other cluster's
// part stays fresh and its changes keep arriving; a change made in the
// frozen cluster while it was frozen arrives within 10 s of its return.
func TestFrozenClusterStaysServedOthersFlow(t *testing.T) {
	eu := startRegion(t, "eu", regionSetup{})
	us := startRegion(t, "us", regionSetup{etcd: []etcdtest.Option{etcdtest.WithProcesses()}})
	beEU, beUS := testbackend.Start(t), testbackend.Start(t)
	eu.register(t, "eu-a", beEU.Addr)
	us.register(t, "us-a", beUS.Addr)
	d := newUnion(t, eu, us)
	w := watch(t, d)
	registrytest.WaitFor(t, w, "both clusters", registrytest.HasIDs("eu-a", "us-a"))
	conn := dial(t, newBuilder(d), "round_robin")
	testbackend.CallUntil(t, conn, 10*time.Second, "calling both", testbackend.HasAll(beEU.Addr, beUS.Addr))

	// The usual latency of a change, for the record.
	arrival := func(i int) time.Duration {
		t.Helper()
		id := fmt.Sprintf("eu-b%d", i)
		start := time.Now()
		eu.register(t, id, fmt.Sprintf("127.0.0.9:%d", 2000+i))
		registrytest.WaitForWithin(t, w, 3*time.Second, id+" in the union", func(s registry.Snapshot) bool {
			for _, in := range s.Instances {
				if in.ID == id {
					return true
				}
			}
			return false
		})
		return time.Since(start)
	}
	t.Logf("eu change before the freeze: %v", arrival(1))

	m := us.c.Members()[0]
	m.Freeze(t)
	frozen := time.Now()
	// Stale within 5 s: the silence limit is 2.5 progress intervals
	// (500 ms); the rest is slack for a loaded machine.
	s := registrytest.WaitForWithin(t, w, 5*time.Second, "us stale", func(s registry.Snapshot) bool { return part(s, "us").Stale() })
	if part(s, "eu").Stale() || !s.Stale() {
		t.Fatalf("us frozen: eu's part stale %v (want fresh), union stale %v (want stale)", part(s, "eu").Stale(), s.Stale())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err := us.reg.Register(ctx, registry.Instance{Name: "user", ID: "us-late", Addr: "127.0.0.8:1000"})
	cancel()
	if !errors.Is(err, registry.ErrPending) {
		t.Fatalf("register in the frozen cluster: %v, want ErrPending", err)
	}
	var worst time.Duration
	for i := 2; time.Since(frozen) < 30*time.Second; i++ {
		// Each round: an eu change arrives within 3 s (WaitForWithin
		// in arrival), us's instance is still listed, stale, and called.
		worst = max(worst, arrival(i))
		s := w.Snapshot()
		if !part(s, "us").Stale() || len(part(s, "us").Instances) != 1 || part(s, "eu").Stale() {
			t.Fatalf("%v into the freeze: us part stale %v with %d instances, eu part stale %v; want us stale with us-a, eu fresh",
				time.Since(frozen).Round(time.Second), part(s, "us").Stale(), len(part(s, "us").Instances), part(s, "eu").Stale())
		}
		beUS.ResetCalls()
		testbackend.CallUntil(t, conn, 5*time.Second, "calling us's backend while its cluster is frozen", func(map[string]int) bool {
			return beUS.Calls() > 0
		})
		pace := time.NewTimer(2 * time.Second) // paces the rounds over the fault; no state is awaited
		<-pace.C
	}
	t.Logf("eu changes while us was frozen: worst %v", worst)
	m.Thaw(t)
	thawed := time.Now()
	registrytest.WaitForWithin(t, w, 10*time.Second, "us's change made while frozen, within 10 s of its return", func(s registry.Snapshot) bool {
		for _, in := range part(s, "us").Instances {
			if in.ID == "us-late" {
				return !part(s, "us").Stale()
			}
		}
		return false
	})
	t.Logf("us's change arrived %v after the thaw", time.Since(thawed))
}

// One cluster's leases all expire at once (its registrar cut off): the
// channel keeps that cluster's instances (protection judges its part on
// its own: 10 of 40 would pass a judgement of the whole list), and the
// other cluster's changes are applied meanwhile.
func TestMassExpiryProtectedPerCluster(t *testing.T) {
	eu := startRegion(t, "eu", regionSetup{})
	us := startRegion(t, "us", regionSetup{discoveryDirect: true})
	eu.registerMany(t, "eu", 30)
	us.registerMany(t, "us", 10)
	d := newUnion(t, eu, us)
	w := watch(t, d)
	ch := openChannel(t, newBuilder(d))
	ch.waitFor(t, 10*time.Second, "both clusters served", func() bool {
		n := ch.served()
		return n["eu"] == 30 && n["us"] == 10
	})
	// The registrar reaches us through the member's proxy, the Discovery
	// directly: stalling the proxy expires the registrar's lease (TTL
	// 2 s) and etcd deletes its 10 keys at once.
	us.c.Members()[0].Stall()
	t.Cleanup(us.c.Members()[0].Heal)
	registrytest.WaitForWithin(t, w, 15*time.Second, "us's instances expired", func(s registry.Snapshot) bool {
		return part(s, "us").Loaded && len(part(s, "us").Instances) == 0 && !part(s, "us").Stale()
	})
	if n := ch.served(); n["us"] != 10 || n["eu"] != 30 {
		t.Fatalf("after us's mass expiry the channel is served %v; want us's 10 kept beside eu's 30", n)
	}
	eu.register(t, "eu-new", "127.0.0.3:2000")
	ch.waitFor(t, 5*time.Second, "eu's change applied while us is protected", func() bool { return ch.has("eu-new", "eu") })
	if n := ch.served(); n["us"] != 10 || n["eu"] != 31 {
		t.Fatalf("eu's change served as %v; want eu's 31 and us's 10 kept", n)
	}
}

// A cluster unreachable when the client starts (partitioned): the other
// cluster's instances are served at once; the late one's join when it
// answers.
func TestClusterUnreachableAtStart(t *testing.T) {
	eu, us := startRegion(t, "eu", regionSetup{}), startRegion(t, "us", regionSetup{})
	eu.register(t, "eu-a", "127.0.0.2:1000")
	us.register(t, "us-a", "127.0.0.3:1000")
	m := us.c.Members()[0]
	m.Stall()
	t.Cleanup(m.Heal)
	d := newUnion(t, eu, us)
	w := watch(t, d)
	ch := openChannel(t, newBuilder(d))
	// At once: eu's first load is one Get on loopback; 5 s of slack for a
	// loaded machine, and us's partition never ends by itself.
	ch.waitFor(t, 5*time.Second, "eu served while us is unreachable", func() bool { return ch.has("eu-a", "eu") })
	s := registrytest.WaitForWithin(t, w, 5*time.Second, "us stale and not loaded", func(s registry.Snapshot) bool {
		return part(s, "us").Stale()
	})
	if part(s, "us").Loaded || !s.Loaded || part(s, "eu").Stale() {
		t.Fatalf("us unreachable: us loaded %v, union loaded %v, eu stale %v", part(s, "us").Loaded, s.Loaded, part(s, "eu").Stale())
	}
	m.Heal()
	// The registrar's lease may have expired in the partition; it
	// registers again once us answers. 10 s: a reload after the backoff
	// (at most 500 ms) and a re-registration after a lost lease.
	ch.waitFor(t, 10*time.Second, "us joined once it answered", func() bool { return ch.has("us-a", "us") && ch.has("eu-a", "eu") })
}

// The union reports its own followed services and watchers, and the loads
// of both clusters' Discoveries summed, so metrics.Discovery collects it
// as it collects one cluster.
func TestUnionReportsStats(t *testing.T) {
	eu, us := startRegion(t, "eu", regionSetup{}), startRegion(t, "us", regionSetup{})
	eu.register(t, "eu-a", "127.0.0.2:1000")
	us.register(t, "us-a", "127.0.0.3:1000")
	d := newUnion(t, eu, us)
	var _ registry.StatsReporter = d
	w := watch(t, d)
	registrytest.WaitForWithin(t, w, 10*time.Second, "both clusters loaded", func(s registry.Snapshot) bool {
		return part(s, "eu").Loaded && part(s, "us").Loaded
	})
	st := d.DiscoveryStats()
	if st.Services != 1 || st.Watchers != 1 || len(st.PerService) != 1 || st.PerService[0].Instances != 2 {
		t.Fatalf("stats %+v: want 1 service, 1 watcher, 2 instances", st)
	}
	if want := eu.disc.DiscoveryStats().Loads + us.disc.DiscoveryStats().Loads; st.Loads != want || want < 2 {
		t.Fatalf("union loads %d, want the clusters' %d (at least one each)", st.Loads, want)
	}
}
