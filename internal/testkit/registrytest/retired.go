package registrytest

import (
	"slices"
	"testing"

	"github.com/musterhq/muster/registry"
)

// testRetired checks that a Deregister is a deliberate departure: the
// registrar drains the instance before it deletes it, so the Discovery
// records the deletion in Snapshot.Retired and clients release the
// instance at once. The deletions of a registrar's Close (a lease
// revoked, a session closed) are not recorded, and an instance registered
// again leaves the record.
func testRetired(t *testing.T, b Backend) {
	ctx := ctxT(t)
	w, err := b.Discovery.Watch(ctx, "retiring")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := b.NewRegistrar(t)
	defer r.Close()
	for i, id := range []string{"a", "b"} {
		if err := r.Register(ctx, inst("retiring", id, 9001+i)); err != nil {
			t.Fatalf("Register %s: %v", id, err)
		}
	}
	s := WaitFor(t, w, "a and b", HasIDs("a", "b"))
	if s.Retired == nil || len(s.Retired) != 0 {
		t.Fatalf("Retired = %#v before any departure, want empty and not nil (the backend records departures)", s.Retired)
	}

	if err := r.Deregister(ctx, "retiring", "a"); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	WaitFor(t, w, "a gone and retired", func(s registry.Snapshot) bool {
		return HasIDs("b")(s) && slices.Equal(s.Retired, []string{"a"})
	})

	if err := r.Register(ctx, inst("retiring", "a", 9001)); err != nil {
		t.Fatalf("Register a again: %v", err)
	}
	s = WaitFor(t, w, "a back", HasIDs("a", "b"))
	if len(s.Retired) != 0 {
		t.Fatalf("Retired = %v with a registered again, want it empty", s.Retired)
	}

	other := b.NewRegistrar(t)
	if err := other.Register(ctx, inst("retiring", "c", 9003)); err != nil {
		t.Fatalf("Register c: %v", err)
	}
	WaitFor(t, w, "c", HasIDs("a", "b", "c"))
	if err := other.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = WaitFor(t, w, "c gone with its registrar", HasIDs("a", "b"))
	if len(s.Retired) != 0 {
		t.Fatalf("Retired = %v after a registrar's Close, want it empty: its instances left serving", s.Retired)
	}
}
