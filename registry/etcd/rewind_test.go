package etcd_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// rewindLog is what the Discovery logs, once, for each rewind.
const rewindLog = "etcd history changed"

// putInstance writes an instance's value without a lease (a static
// instance) and returns the revision of the write.
func putInstance(t *testing.T, cli *clientv3.Client, prefix string, in registry.Instance) int64 {
	t.Helper()
	v, err := registry.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Put(ctx, registry.Key(prefix, in.Name, in.ID), string(v))
	if err != nil {
		t.Fatalf("put %s: %v", in.ID, err)
	}
	return resp.Header.Revision
}

// putRaw writes key=val and returns the revision of the write.
func putRaw(t *testing.T, cli *clientv3.Client, key, val string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Put(ctx, key, val)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

// TestDiscoveryFollowsEtcdRestartedEmpty restarts etcd with an empty data
// directory, as a new cluster on the same endpoint: revisions start again
// below the ones the Discovery saw. The snapshot must follow the new
// history under a new Generation, and the rewind be logged once. Without
// the rewind detection the content follows (every reload is a full Get)
// but the Generation does not change, so a consumer comparing revisions
// (the resolver's disk snapshots) would keep the old history's list.
func TestDiscoveryFollowsEtcdRestartedEmpty(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	logs := &lockedBuffer{}
	d := newDiscovery(t, cli, disc("/p", etcd.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))...)
	ctx := ctxFor(t, 60*time.Second)

	putInstance(t, cli, "/p", instance("svc", "old-a", 9000))
	putInstance(t, cli, "/p", instance("svc", "old-b", 9001))
	for i := 0; i < 30; i++ { // the old history runs well ahead of the new one
		putRaw(t, cli, "/other/k", fmt.Sprint(i))
	}
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	before := registrytest.WaitFor(t, w, "old-a and old-b", registrytest.HasIDs("old-a", "old-b"))
	if before.Generation != 1 {
		t.Fatalf("Generation = %d after the first load, want 1", before.Generation)
	}

	c.Wipe(t)
	wiped := time.Now()
	r := newRegistrar(t, cli, reg("/p")...)
	if err := r.Register(ctx, instance("svc", "new-a", 9100)); err != nil {
		t.Fatal(err)
	}
	after := registrytest.WaitFor(t, w, "new-a only, in a new generation, fresh", func(s registry.Snapshot) bool {
		return registrytest.HasIDs("new-a")(s) && s.Generation != before.Generation && !s.Stale()
	})
	t.Logf("new history followed %v after the wipe: revision %d -> %d, generation %d -> %d",
		time.Since(wiped).Round(time.Millisecond), before.Revision, after.Revision, before.Generation, after.Generation)
	if after.Generation != 2 {
		t.Fatalf("Generation = %d after one rewind, want 2", after.Generation)
	}
	if after.Revision >= before.Revision {
		t.Fatalf("the new history's revision %d is not below the old one's %d; the test did not rewind", after.Revision, before.Revision)
	}
	if got := d.Stats().Rewinds; got != 1 {
		t.Fatalf("Stats().Rewinds = %d, want 1", got)
	}
	if got := logs.count(rewindLog); got != 1 {
		t.Fatalf("the rewind was logged %d times, want once:\n%s", got, logs.String())
	}
}

// TestDiscoveryFollowsARestoreOfAnOlderDataDir restores a copy of etcd's
// data directory taken before the changes the Discovery saw, then writes a
// new history over the same revisions, among them a bad value at the same
// key and mod revision as a bad value of the old history. The snapshot must
// equal a fresh load, under a new Generation, and the new bad value be
// counted: the once-per-mod-revision record of bad values belongs to the
// old history. The Discovery's connection is stalled from before the
// restore until the new history is written, so that its reload sees it.
func TestDiscoveryFollowsARestoreOfAnOlderDataDir(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	viaProxy := c.Client(t)
	logs := &lockedBuffer{}
	d := newDiscovery(t, viaProxy, disc("/p", etcd.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))...)
	ctx := ctxFor(t, 90*time.Second)
	direct := c.Client(t, c.DirectEndpoints()...)

	putInstance(t, direct, "/p", instance("svc", "a", 9000))
	putInstance(t, direct, "/p", instance("svc", "b", 9001))
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "a and b", registrytest.HasIDs("a", "b"))

	// The backup (the member is stopped for the copy and started again).
	backup := c.Backup(t)

	// The old history after the backup: a deleted, c added, b drained by
	// an override, a bad value.
	if _, err := direct.Delete(ctx, registry.Key("/p", "svc", "a")); err != nil {
		t.Fatal(err)
	}
	putInstance(t, direct, "/p", instance("svc", "c", 9002))
	drain := 0
	if err := etcd.SetOverride(ctx, direct, "svc", "b", registry.Override{Weight: &drain}, etcd.WithPrefix("/p")); err != nil {
		t.Fatal(err)
	}
	badKey := registry.Key("/p", "svc", "x")
	badRev := putRaw(t, direct, badKey, "not json (old history)")
	for i := 0; i < 20; i++ {
		putRaw(t, direct, "/other/k", fmt.Sprint(i))
	}
	// The old history's last write is the service's, so the Discovery is
	// woken when it has seen it.
	last := putInstance(t, direct, "/p", instance("svc", "y", 9004))
	before := registrytest.WaitFor(t, w, fmt.Sprintf("b, c and y, the old history's last write (revision %d)", last),
		func(s registry.Snapshot) bool { return registrytest.HasIDs("b", "c", "y")(s) && s.Revision >= last })
	if got := d.Stats().SkippedValues; got != 1 {
		t.Fatalf("SkippedValues = %d before the restore, want 1", got)
	}
	if b := before.Instances[0]; b.ID != "b" || b.Weight != 0 {
		t.Fatalf("b not drained by its override before the restore: %+v", *b)
	}

	// The restore, and a new history written while the Discovery cannot
	// read it.
	m.Stall()
	c.Restore(t, backup)
	restored := time.Now()
	putInstance(t, direct, "/p", instance("svc", "d", 9003))
	for rev := putRaw(t, direct, "/other/k", "new"); rev < badRev-1; {
		rev = putRaw(t, direct, "/other/k", "new")
	}
	if rev := putRaw(t, direct, badKey, "not json either (new history)"); rev != badRev {
		t.Fatalf("the new history's bad value is at revision %d, want %d (the old one's)", rev, badRev)
	}
	m.Heal()

	after := registrytest.WaitFor(t, w, "a, b and d in a new generation, fresh", func(s registry.Snapshot) bool {
		return registrytest.HasIDs("a", "b", "d")(s) && s.Generation != before.Generation && !s.Stale()
	})
	t.Logf("restore followed %v after the restart: revision %d -> %d, generation %d -> %d",
		time.Since(restored).Round(time.Millisecond), before.Revision, after.Revision, before.Generation, after.Generation)

	// A fresh load of the restored store.
	fresh := newDiscovery(t, direct, disc("/p")...)
	fw, err := fresh.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	want := registrytest.WaitFor(t, fw, "a fresh load", func(s registry.Snapshot) bool { return s.Loaded })
	if b := after.Instances[1]; b.ID != "b" || b.Weight == 0 {
		t.Fatalf("b still drained after the restore, which has no override: %+v", *b)
	}
	if !sameInstances(after, want) || after.Revision != want.Revision {
		t.Fatalf("after the restore the snapshot is %s, a fresh load %s", registrytest.Describe(after), registrytest.Describe(want))
	}
	if got := d.Stats().SkippedValues; got != 2 {
		t.Fatalf("SkippedValues = %d after the restore, want 2 (the new history's bad value counted)", got)
	}
	if got := logs.count(rewindLog); got != 1 {
		t.Fatalf("the rewind was logged %d times, want once:\n%s", got, logs.String())
	}
}

// sameInstances reports whether two snapshots list equal instances.
func sameInstances(a, b registry.Snapshot) bool {
	if len(a.Instances) != len(b.Instances) {
		return false
	}
	for i := range a.Instances {
		if !a.Instances[i].Equal(*b.Instances[i]) {
			return false
		}
	}
	return true
}
