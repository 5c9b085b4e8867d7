package registrytest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// RunStore runs the suite every registry.Store must pass. open returns a
// new Store on one fresh part of the backend per subtest: two calls in
// the same subtest open the same registry (the same prefix), as two
// processes would. The suite closes the stores it opens.
func RunStore(t *testing.T, open func(t *testing.T) registry.Store) {
	t.Run("OneRegistrarClosedWithTheStore", func(t *testing.T) { testStoreLifecycle(t, open) })
	t.Run("OverridesReachClients", func(t *testing.T) { testStoreOverrides(t, open) })
	t.Run("SettingsReadWrittenAndFollowed", func(t *testing.T) { testStoreSettings(t, open) })
	t.Run("ActorRecordedOrRefused", func(t *testing.T) { testStoreActor(t, open) })
}

// watch follows service in s's Discovery.
func watch(t *testing.T, s registry.Store, service string) registry.Watcher {
	t.Helper()
	w, err := s.Discovery().Watch(ctxT(t), service)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func testStoreLifecycle(t *testing.T, open func(t *testing.T) registry.Store) {
	ctx := ctxT(t)
	server, client := open(t), open(t)
	defer client.Close()
	if a, b := server.Registrar(), server.Registrar(); a != b {
		t.Fatal("Registrar returned two registrars; want the store's one")
	}
	w := watch(t, client, "greeter")
	if err := server.Registrar().Register(ctx, inst("greeter", "a", 9001)); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, w, "the registered instance in another store's Discovery", HasIDs("a"))
	if lister, ok := client.Discovery().(registry.ServiceLister); !ok {
		t.Errorf("the Discovery %T lists no services (registry.ServiceLister)", client.Discovery())
	} else if names, err := lister.Services(ctx); err != nil || !strings.Contains(strings.Join(names, ","), "greeter") {
		t.Errorf("Services = %v, %v; want greeter among them", names, err)
	}
	if err := server.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	WaitFor(t, w, "the instance gone after its store closed", HasIDs())
	if err := server.Close(); err != nil {
		t.Errorf("second Close: %v; want nil", err)
	}
	if err := server.Registrar().Register(ctx, inst("greeter", "b", 9002)); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Register after Close: %v; want registry.ErrClosed", err)
	}
	fresh := open(t)
	if err := fresh.Close(); err != nil {
		t.Errorf("Close of a store whose Registrar was never asked for: %v", err)
	}
	if err := fresh.Registrar().Register(ctx, inst("greeter", "c", 9003)); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Register on a Registrar asked for after Close: %v; want registry.ErrClosed", err)
	}
}

func testStoreOverrides(t *testing.T, open func(t *testing.T) registry.Store) {
	ctx := ctxT(t)
	s := open(t)
	defer s.Close()
	admin := s.Admin(registry.Actor{Who: "alice", Source: registry.SourceCommand})
	w := watch(t, s, "greeter")
	if err := admin.SetOverride(ctx, "greeter", "a", registry.Override{Weight: ptr(0)}); !errors.Is(err, registry.ErrNoInstance) {
		t.Fatalf("SetOverride of an instance not registered: %v; want registry.ErrNoInstance", err)
	}
	if err := s.Registrar().Register(ctx, inst("greeter", "a", 9001)); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, w, "the instance", HasIDs("a"))
	if err := admin.SetOverride(ctx, "greeter", "a", registry.Override{Weight: ptr(0)}); err != nil {
		t.Fatalf("SetOverride: %v", err)
	}
	WaitFor(t, w, "the instance drained by the override", func(s registry.Snapshot) bool {
		return len(s.Instances) == 1 && s.Instances[0].Draining
	})
	ov, err := admin.Overrides(ctx, "greeter")
	if err != nil || len(ov) != 1 || ov["a"].Weight == nil || *ov["a"].Weight != 0 {
		t.Fatalf("Overrides = %v, %v; want a drained", ov, err)
	}
	if err := admin.ClearOverride(ctx, "greeter", "a"); err != nil {
		t.Fatalf("ClearOverride: %v", err)
	}
	WaitFor(t, w, "the instance undrained", func(s registry.Snapshot) bool {
		return len(s.Instances) == 1 && !s.Instances[0].Draining
	})
	if ov, err := admin.Overrides(ctx, "greeter"); err != nil || len(ov) != 0 {
		t.Errorf("Overrides after ClearOverride = %v, %v; want none", ov, err)
	}
	if err := admin.ClearOverride(ctx, "greeter", "a"); err != nil {
		t.Errorf("ClearOverride of none: %v; want nil", err)
	}
}

func testStoreSettings(t *testing.T, open func(t *testing.T) registry.Store) {
	ctx := ctxT(t)
	s := open(t)
	defer s.Close()
	admin := s.Admin(registry.Actor{})
	canaries, ok := s.(registry.CanarySource)
	if !ok {
		t.Fatalf("%T follows no canaries (registry.CanarySource)", s)
	}
	policies, ok := s.(registry.PolicySource)
	if !ok {
		t.Fatalf("%T follows no policies (registry.PolicySource)", s)
	}
	if _, ok, err := admin.Canary(ctx, "greeter"); ok || err != nil {
		t.Fatalf("Canary before any = %v, %v; want none", ok, err)
	}
	if _, ok, err := admin.Policy(ctx, "greeter"); ok || err != nil {
		t.Fatalf("Policy before any = %v, %v; want none", ok, err)
	}
	cch := canaries.WatchCanary(ctx, "greeter")
	pch := policies.WatchPolicy(ctx, "greeter")
	awaitValue(t, cch, "no canary at first", func(c registry.Canary) bool { return c == registry.Canary{} })
	awaitValue(t, pch, "no policy at first", registry.Policy.IsZero)

	canary := registry.Canary{Color: "blue", Percent: 5}
	if err := admin.SetCanary(ctx, "greeter", canary); err != nil {
		t.Fatalf("SetCanary: %v", err)
	}
	if c, ok, err := admin.Canary(ctx, "greeter"); !ok || err != nil || c != canary {
		t.Errorf("Canary = %+v, %v, %v; want %+v", c, ok, err, canary)
	}
	awaitValue(t, cch, "the canary followed", func(c registry.Canary) bool { return c == canary })

	policy := registry.Policy{Timeout: 2 * time.Second, MaxConcurrent: 10}
	if err := admin.SetPolicy(ctx, "greeter", policy); err != nil {
		t.Fatalf("SetPolicy: %v", err)
	}
	if info, ok, err := admin.Policy(ctx, "greeter"); !ok || err != nil || !info.Policy.Equal(policy.Normalize()) {
		t.Errorf("Policy = %+v, %v, %v; want %+v", info, ok, err, policy)
	}
	awaitValue(t, pch, "the policy followed", func(p registry.Policy) bool { return p.Equal(policy.Normalize()) })

	if err := admin.ClearCanary(ctx, "greeter"); err != nil {
		t.Fatalf("ClearCanary: %v", err)
	}
	if err := admin.ClearPolicy(ctx, "greeter"); err != nil {
		t.Fatalf("ClearPolicy: %v", err)
	}
	awaitValue(t, cch, "the canary cleared", func(c registry.Canary) bool { return c == registry.Canary{} })
	awaitValue(t, pch, "the policy cleared", registry.Policy.IsZero)
	if err := admin.ClearCanary(ctx, "greeter"); err != nil {
		t.Errorf("ClearCanary of none: %v; want nil", err)
	}
	if err := admin.ClearPolicy(ctx, "greeter"); err != nil {
		t.Errorf("ClearPolicy of none: %v; want nil", err)
	}
}

func testStoreActor(t *testing.T, open func(t *testing.T) registry.Store) {
	ctx := ctxT(t)
	s := open(t)
	defer s.Close()
	bad := s.Admin(registry.Actor{Who: "alice\n"})
	if err := bad.SetCanary(ctx, "greeter", registry.Canary{Color: "blue", Percent: 5}); err == nil {
		t.Fatal("a write by an Actor whose Who is not printable succeeded; want its error")
	}
	if _, ok, _ := s.Admin(registry.Actor{}).Canary(ctx, "greeter"); ok {
		t.Fatal("the refused Actor's canary was written")
	}
	admin := s.Admin(registry.Actor{Who: "alice", Source: registry.SourceConsole})
	if err := admin.SetPolicy(ctx, "greeter", registry.Policy{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	if info, _, err := admin.Policy(ctx, "greeter"); err != nil || (info.SetBy != "" && info.SetBy != "alice (console)") {
		t.Errorf("Policy's SetBy = %q, %v; want \"alice (console)\", or \"\" where the backend records no setter", info.SetBy, err)
	}
	h, ok := admin.(registry.HistoryReader)
	if !ok {
		return
	}
	recs, err := h.History(ctx, "greeter", 1)
	if err != nil || len(recs) != 1 {
		t.Fatalf("History = %v, %v; want the policy's record", recs, err)
	}
	if r := recs[0]; r.Who != "alice" || r.Source != registry.SourceConsole || r.Action != registry.ActionPolicySet {
		t.Errorf("record = who %q source %q action %q; want alice, console, %s", r.Who, r.Source, r.Action, registry.ActionPolicySet)
	}
}

// awaitValue reads ch until cond holds for a value, failing t after
// WaitTimeout.
func awaitValue[T any](t *testing.T, ch <-chan T, what string, cond func(T) bool) {
	t.Helper()
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	var last T
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed while waiting for %s; last value %+v", what, last)
			}
			if cond(v) {
				return
			}
			last = v
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for %s; last value %+v", WaitTimeout, what, last)
		}
	}
}

func ptr[T any](v T) *T { return &v }
