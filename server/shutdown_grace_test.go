package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
	"github.com/musterhq/muster/server"
)

// TestShutdownLeavesTheChannelWithinASecond: the instance Shutdown
// deregisters leaves a client's resolver state within 1 s of its key's
// deletion, although the client holds an instance that vanishes from the
// registry while serving for the deletion grace (resolver's default, 3 s):
// the registrar drains the instance in the registry before it deletes it,
// so the deletion is seen as deliberate. Without that drain the client
// holds the instance for the grace and the test fails.
func TestShutdownLeavesTheChannelWithinASecond(t *testing.T) {
	const bound = time.Second
	e := newEnv(t)
	a := e.start(t, "a", server.WithDrainDelay(10*time.Second))
	b := e.start(t, "b")
	addrA, addrB := a.s.Instance().Addr, b.s.Instance().Addr

	states := followStates(t, e, addrA, addrB)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := e.cli.Watch(ctx, registry.Key(registry.DefaultPrefix, "greeter", "a"), clientv3.WithCreatedNotify())
	<-events
	shut := make(chan error, 1)
	go func() { shut <- a.s.Shutdown(ctx) }()
	var deleted, left time.Time
	drainedFirst := false
	timeout := time.After(10 * time.Second)
	for deleted.IsZero() || left.IsZero() {
		select {
		case resp := <-events:
			for _, ev := range resp.Events {
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					deleted = time.Now()
				case deleted.IsZero():
					in, err := registry.Unmarshal(ev.Kv.Value)
					drainedFirst = err == nil && in.Draining
				}
			}
		case addrs := <-states:
			if left.IsZero() && !slices.Contains(addrs, addrA) {
				left = time.Now()
			}
		case <-timeout:
			t.Fatalf("within 10 s of Shutdown: key deleted %v, a out of the client's state %v", !deleted.IsZero(), !left.IsZero())
		}
	}
	took := left.Sub(deleted)
	t.Logf("a drained in the registry before its deletion: %v; out of the client's state %v after its key was deleted (grace %v)",
		drainedFirst, took.Round(time.Millisecond), resolver.DefaultDeletionGrace)
	if took > bound {
		t.Fatalf("a left the client's state %v after its key was deleted, want within %v: its deletion was held as an accident's", took.Round(time.Millisecond), bound)
	}
	if !drainedFirst {
		t.Fatalf("a's key was deleted without being written draining first")
	}
	cancel() // end the drain delay
	<-shut
}
