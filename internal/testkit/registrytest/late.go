package registrytest

import (
	"context"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

// testLateWatcher checks that a watcher added to a service already loaded
// by another watcher is woken at once: a consumer reads the snapshot only
// after a wake, so one woken only by the next change would see nothing
// until the service changes. publish makes in the service's only instance.
func testLateWatcher(t *testing.T, d registry.Discovery, publish func(in registry.Instance)) {
	ctx := context.Background() // watchers closed here, not by a deadline racing the wait
	first, err := d.Watch(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	publish(inst("late", "l1", 9100))
	WaitFor(t, first, "the first watcher loads l1", HasIDs("l1"))
	second, err := d.Watch(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	select {
	case _, ok := <-second.Updates():
		if !ok {
			t.Fatalf("second watcher's Updates closed before any wake")
		}
	case <-time.After(WaitTimeout):
		t.Fatalf("a watcher added to a loaded service was not woken within %v", WaitTimeout)
	}
	if s := second.Snapshot(); !HasIDs("l1")(s) {
		t.Fatalf("second watcher's snapshot after its wake is %s, want l1", Describe(s))
	}
}
