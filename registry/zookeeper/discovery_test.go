package zookeeper_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
)

// Many watchers of one service share one service loop (and its watches);
// a bad value is skipped and counted once, the other instances served.
func TestSharedWatchAndBadValues(t *testing.T) {
	c := zktest.Start(t)
	r := newRegistrar(t, c.Addrs(), fast(root)...)
	d := newDiscovery(t, c.Addrs(), fast(root)...)
	raw := rawConn(t, c.DirectAddrs())
	register(t, r, inst("a", 1))
	ws := []registry.Watcher{watch(t, d, "svc"), watch(t, d, "svc"), watch(t, d, "svc")}
	for _, w := range ws {
		registrytest.WaitFor(t, w, "a", registrytest.HasIDs("a"))
	}
	if st := d.Stats(); st.Services != 1 || st.Watchers != 3 || st.Loads != 1 {
		t.Fatalf("stats %+v, want one service loaded once for three watchers", st)
	}
	for _, bad := range []struct{ id, value string }{
		{"junk", "not json"},
		{"other", `{"v":1,"id":"zzz","name":"svc","addr":"127.0.0.1:9"}`}, // ID differs from the node
	} {
		if _, err := raw.Create(root+"/svc/"+bad.id, []byte(bad.value), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	register(t, r, inst("b", 2))
	registrytest.WaitFor(t, ws[0], "a and b, bad values skipped", registrytest.HasIDs("a", "b"))
	if st := d.Stats(); st.SkippedValues != 2 {
		t.Fatalf("SkippedValues = %d, want 2", st.SkippedValues)
	}
	names, err := d.Services(context.Background())
	if err != nil || len(names) != 1 || names[0] != "svc" {
		t.Fatalf("Services = %v, %v", names, err)
	}
}

// An operator's override drains an instance in every Discovery, survives
// the registrar writing the node again, and is cleared.
func TestOverrides(t *testing.T) {
	c := zktest.Start(t)
	r := newRegistrar(t, c.Addrs(), fast(root)...)
	d := newDiscovery(t, c.Addrs(), fast(root)...)
	raw := rawConn(t, c.DirectAddrs())
	w := watch(t, d, "svc")
	register(t, r, inst("a", 1), inst("b", 2))
	registrytest.WaitFor(t, w, "a and b", registrytest.HasIDs("a", "b"))
	ctx := context.Background()
	zero := 0
	if err := zookeeper.SetOverride(ctx, c.Addrs(), "svc", "a", registry.Override{Weight: &zero}, fast(root)...); err != nil {
		t.Fatal(err)
	}
	drained := func(s registry.Snapshot) bool {
		return registrytest.HasIDs("a", "b")(s) && s.Instances[0].EffectiveWeight() == 0 && s.Instances[1].EffectiveWeight() == registry.DefaultWeight
	}
	registrytest.WaitFor(t, w, "a drained", drained)
	if ov, err := d.Overrides(ctx, "svc"); err != nil || len(ov) != 1 || ov["a"].Weight == nil || *ov["a"].Weight != 0 {
		t.Fatalf("Overrides = %v, %v; want a at weight 0", ov, err)
	}
	// The node deleted by hand is written again with the same
	// registration: the override still applies.
	if err := raw.Delete(root+"/svc/a", -1); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, r, "a repaired", func(st registry.RegistrarStatus) bool { return st.Repairs == 1 })
	registrytest.WaitFor(t, w, "a back and still drained", drained)
	if err := zookeeper.SetOverride(ctx, c.Addrs(), "svc", "nope", registry.Override{Weight: &zero}, fast(root)...); !errors.Is(err, zookeeper.ErrNoInstance) {
		t.Fatalf("override of an unknown instance = %v, want ErrNoInstance", err)
	}
	if err := zookeeper.ClearOverride(ctx, c.Addrs(), "svc", "a", fast(root)...); err != nil {
		t.Fatal(err)
	}
	_, before, err := raw.Get(root + "/svc")
	if err != nil {
		t.Fatal(err)
	}
	if err := zookeeper.ClearOverride(ctx, c.Addrs(), "svc", "a", fast(root)...); err != nil {
		t.Fatalf("ClearOverride with no override: %v", err)
	}
	if _, after, err := raw.Get(root + "/svc"); err != nil || after.Version != before.Version {
		t.Fatalf("ClearOverride with no override wrote the service node (version %d -> %d, %v)", before.Version, after.Version, err)
	}
	if err := zookeeper.ClearOverride(ctx, c.Addrs(), "none", "a", fast(root)...); err != nil {
		t.Fatalf("ClearOverride of a service with no node = %v, want nil", err)
	}
	if _, err := d.Registered(ctx, "svc", "a/b"); !errors.Is(err, registry.ErrInvalidInstance) {
		t.Fatalf("Registered with a bad ID = %v, want ErrInvalidInstance", err)
	}
	registrytest.WaitFor(t, w, "a serving again", func(s registry.Snapshot) bool {
		return registrytest.HasIDs("a", "b")(s) && s.Instances[0].EffectiveWeight() == registry.DefaultWeight
	})

	// A new registration of the same ID (another process: a new
	// RegisteredAt) is not drained by the old override.
	if err := zookeeper.SetOverride(ctx, c.Addrs(), "svc", "b", registry.Override{Weight: &zero}, fast(root)...); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "b drained", func(s registry.Snapshot) bool {
		return len(s.Instances) == 2 && s.Instances[1].EffectiveWeight() == 0
	})
	if err := r.Deregister(ctx, "svc", "b"); err != nil {
		t.Fatal(err)
	}
	r2 := newRegistrar(t, c.Addrs(), fast(root)...)
	later := inst("b", 2)
	later.RegisteredAt = time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	register(t, r2, later)
	registrytest.WaitFor(t, w, "the new b, not drained", func(s registry.Snapshot) bool {
		return registrytest.HasIDs("a", "b")(s) && s.Instances[1].RegisteredAt.Equal(later.RegisteredAt) && s.Instances[1].EffectiveWeight() == registry.DefaultWeight
	})
}

func TestInvalidOptions(t *testing.T) {
	for _, opt := range []zookeeper.Option{
		zookeeper.WithRoot("relative"), zookeeper.WithRoot("/"), zookeeper.WithRoot("/a/"),
		zookeeper.WithSessionTimeout(0), zookeeper.WithRequestTimeout(0), zookeeper.WithAuditInterval(-1),
		zookeeper.WithLogger(nil),
	} {
		if _, err := zookeeper.NewRegistrar([]string{"127.0.0.1:1"}, opt); err == nil {
			t.Errorf("an invalid option was accepted by NewRegistrar")
		}
		if _, err := zookeeper.NewDiscovery([]string{"127.0.0.1:1"}, opt); err == nil {
			t.Errorf("an invalid option was accepted by NewDiscovery")
		}
	}
	if _, err := zookeeper.NewDiscovery(nil); err == nil {
		t.Errorf("no servers accepted")
	}
}

// An instance's zone and region reach every Discovery as registered: the
// node holds the registry codec's value, region after zone.
func TestZoneAndRegionRoundTrip(t *testing.T) {
	c := zktest.Start(t)
	r := newRegistrar(t, c.Addrs(), fast(root)...)
	d := newDiscovery(t, c.Addrs(), fast(root)...)
	raw := rawConn(t, c.DirectAddrs())
	w := watch(t, d, "svc")
	in := inst("a", 1)
	in.Zone, in.Region = "eu-1a", "eu-1"
	register(t, r, in, inst("b", 2))
	s := registrytest.WaitFor(t, w, "a and b", registrytest.HasIDs("a", "b"))
	if a, b := s.Instances[0], s.Instances[1]; a.Zone != "eu-1a" || a.Region != "eu-1" || b.Zone != "" || b.Region != "" {
		t.Fatalf("discovered a in zone %q region %q, b in zone %q region %q; want eu-1a, eu-1 and none", a.Zone, a.Region, b.Zone, b.Region)
	}
	got, err := d.Registered(context.Background(), "svc", "a")
	if err != nil || got.Region != "eu-1" {
		t.Fatalf("Registered = %+v, %v; want region eu-1", got, err)
	}
	value, _, err := raw.Get(root + "/svc/a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(value), `"zone":"eu-1a","region":"eu-1"`) {
		t.Fatalf("node value %s, want the zone and region of the registry codec", value)
	}
}
