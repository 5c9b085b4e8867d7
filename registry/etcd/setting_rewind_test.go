package etcd_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// TestCanaryFollowsARestoreOfAnOlderDataDir restores etcd from a data
// directory taken before the canary's last changes: the store's revisions
// go back under the same cluster. The follower must deliver the restored
// value, then a change written after the restore, whose revision is below
// the ones it saw. etcd's client resumes a broken watch from the last
// revision it delivered, which the restored store reaches only after as
// many writes; etcd answers neither events nor progress requests on it, so
// the silence detection gives it up for a new Get (without it the follower
// never sees either value).
func TestCanaryFollowsARestoreOfAnOlderDataDir(t *testing.T) {
	c := etcdtest.Start(t)
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("follower log:\n%s", logs.String())
		}
	})
	cli := c.Client(t)
	opts := []etcd.WatchOption{etcd.WithPrefix("/p"), etcd.WithProgressInterval(200 * time.Millisecond),
		etcd.WithRequestTimeout(time.Second), etcd.WithBackoff(50*time.Millisecond, 200*time.Millisecond),
		etcd.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}
	ctx := ctxFor(t, 90*time.Second)
	cs, err := etcd.NewCanaries(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	next := canaryReader(t, cs.WatchCanary(ctx, "svc"))
	direct := c.Client(t, c.DirectEndpoints()...)
	set := func(cn registry.Canary) {
		t.Helper()
		if err := etcd.SetCanary(ctx, direct, "svc", cn, writes("/p", etcd.WithRequestTimeout(time.Second))...); err != nil {
			t.Fatal(err)
		}
	}
	old := registry.Canary{Color: "blue", Percent: 10}
	set(old)
	next(old, 10*time.Second)
	backup := c.Backup(t)
	for i := 0; i < 20; i++ {
		putRaw(t, direct, "/other/k", fmt.Sprint(i))
	}
	later := registry.Canary{Color: "blue", Percent: 30}
	set(later)
	next(later, 10*time.Second)

	c.Restore(t, backup)
	restored := time.Now()
	const bound = 6 * time.Second // a reconnect, 2.5 progress intervals, a Get, backoff
	next(old, bound)
	t.Logf("the restored canary seen %v after the restore", time.Since(restored).Round(time.Millisecond))
	after := registry.Canary{Color: "green", Percent: 5}
	set(after)
	start := time.Now()
	next(after, bound)
	t.Logf("a change after the restore seen after %v", time.Since(start).Round(time.Millisecond))
}
