package etcd_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// A Discovery behind its watch applies the responses already queued before
// publishing one snapshot of them all: far fewer snapshots than responses,
// and no reload. Here it is held back by its logger, which blocks on the
// report of a bad value while 600 keys are written one request each (etcd
// sends one response per revision to a watcher that keeps up, and the etcd
// client buffers them), as responses queue when a mass expiry's trickle
// outpaces the Discovery.
func TestQueuedWatchResponsesArePublishedTogether(t *testing.T) {
	const keys = 600
	c := etcdtest.Start(t)
	cli := c.Client(t)
	gate := newGate()
	t.Cleanup(gate.open)
	d := newDiscovery(t, cli, disc("/p", etcd.WithLogger(slog.New(gate)))...)
	ctx := ctxFor(t, 90*time.Second)
	putInstance(t, cli, "/p", instance("svc", "first", 9000))
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "the first instance", registrytest.HasIDs("first"))
	before := d.Stats()

	if _, err := cli.Put(ctx, registry.Key("/p", "svc", "bad"), "not json"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the bad value was not reported within 30s")
	}
	for i := range keys {
		putInstance(t, cli, "/p", instance("svc", fmt.Sprintf("i%04d", i), 9000))
	}
	gate.open()
	registrytest.WaitFor(t, w, fmt.Sprintf("all %d instances", keys+1), func(s registry.Snapshot) bool {
		return len(s.Instances) == keys+1
	})
	after := d.Stats()
	responses := after.WatchResponses - before.WatchResponses
	changes := after.Changes - before.Changes
	t.Logf("%d keys written one request each: %d watch responses, %d snapshots published", keys, responses, changes)
	if after.Resyncs != before.Resyncs || after.Loads != before.Loads {
		t.Fatalf("the service was reloaded (%d resyncs, %d loads before; %d, %d after): the watch was not followed",
			before.Resyncs, before.Loads, after.Resyncs, after.Loads)
	}
	if responses < keys/2 {
		t.Fatalf("only %d watch responses for %d writes: nothing queued to test", responses, keys)
	}
	if changes*4 > responses {
		t.Fatalf("%d snapshots published for %d queued watch responses; want at most a quarter", changes, responses)
	}
}

// gate is a log handler that blocks the first report of a bad value until
// opened, holding the Discovery's goroutine.
type gate struct {
	entered  chan struct{}
	released chan struct{}
	once     *sync.Once
	first    *sync.Once
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}), released: make(chan struct{}), once: new(sync.Once), first: new(sync.Once)}
}

func (g *gate) open() { g.once.Do(func() { close(g.released) }) }

func (g *gate) Enabled(context.Context, slog.Level) bool { return true }

func (g *gate) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "skipping bad registry value" {
		g.first.Do(func() {
			close(g.entered)
			<-g.released
		})
	}
	return nil
}

func (g *gate) WithAttrs([]slog.Attr) slog.Handler { return g }

func (g *gate) WithGroup(string) slog.Handler { return g }
