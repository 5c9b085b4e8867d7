package resolver_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// diskSnapshot is what the test reads of a snapshot file.
type diskSnapshot struct {
	Revision   int64             `json:"revision"`
	Generation uint64            `json:"generation"`
	Instances  []json.RawMessage `json:"instances"`
	addrs      []string
}

func readDiskSnapshot(t *testing.T, dir, service string) (diskSnapshot, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, service+".json"))
	if os.IsNotExist(err) {
		return diskSnapshot{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var s diskSnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("snapshot file: %v", err)
	}
	for _, raw := range s.Instances {
		in, err := registry.Unmarshal(raw)
		if err != nil {
			t.Fatalf("snapshot file: %v", err)
		}
		s.addrs = append(s.addrs, in.Addr)
	}
	slices.Sort(s.addrs)
	return s, true
}

// waitDiskSnapshot polls the snapshot file (a file gives no event to
// wait on) until cond holds, for at most d.
func waitDiskSnapshot(t *testing.T, dir, service, what string, d time.Duration, cond func(diskSnapshot) bool) diskSnapshot {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s, ok := readDiskSnapshot(t, dir, service)
		if ok && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the snapshot file is not %s: exists %v, revision %d, generation %d, instances %v",
				d, what, ok, s.Revision, s.Generation, s.addrs)
		}
		time.Sleep(20 * time.Millisecond) // polling a file
	}
}

// snapshotSetup starts a Registrar (given regOpts) and a Discovery on cli,
// and a Builder writing disk snapshots to dir; the function returned
// registers a new greeter backend as id (waiting out registry.ErrPending
// while etcd comes back) and returns its address.
func snapshotSetup(t *testing.T, cli *clientv3.Client, dir string, regOpts ...etcd.RegistrarOption) (*etcd.Discovery, *resolver.Builder, func(id string) string) {
	t.Helper()
	reg, err := etcd.NewRegistrar(cli, regOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	disc, err := etcd.NewDiscovery(cli, etcdopts.Discovery()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disc.Close() })
	serve := func(id string) string {
		t.Helper()
		be := testbackend.Start(t)
		registrytest.RegisterEventually(t, reg, registry.Instance{Name: "greeter", ID: id, Addr: be.Addr})
		return be.Addr
	}
	return disc, resolver.NewBuilder(disc, resolver.WithSnapshotDir(dir), resolver.WithLogger(quiet)), serve
}

// etcd restarted on an empty data dir: the registry's revisions start
// again from 1, below the revision the disk snapshot was written at. The
// file follows the new history (a new cluster ID: the Discovery starts a
// new generation), and a client that cold-starts from it
// during a later outage is served the current list, with the server that
// registered after the restart.
func TestSnapshotFollowsAnEtcdRestartedEmpty(t *testing.T) {
	dir := t.TempDir()
	old := etcdtest.Start(t)
	cli := old.Client(t)
	_, bld, serve := snapshotSetup(t, cli, dir, etcdopts.Registrar()...)

	// A history with some past: other keys written before the servers.
	for i := range 30 {
		if _, err := cli.Put(ctxFor(t, 5*time.Second), "/other/key", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	a, b := serve("a"), serve("b")
	conn := dial(t, grpc.WithResolvers(bld), "muster:///greeter")
	callUntil(t, conn, "both servers called", hasAll(a, b))
	before := waitDiskSnapshot(t, dir, "greeter", "a and b", 10*time.Second, func(s diskSnapshot) bool {
		return slices.Equal(s.addrs, slices.Sorted(slices.Values([]string{a, b})))
	})

	// etcd comes back empty (here: a new cluster the same client now talks
	// to). The registrar re-registers a and b on a new lease; c registers.
	old.Members()[0].Stop(t)
	fresh := etcdtest.Start(t)
	cli.SetEndpoints(fresh.Endpoints()...)
	restarted := time.Now()
	c := serve("c")
	callUntil(t, conn, "the server registered after the restart called", hasAll(c))
	all := slices.Sorted(slices.Values([]string{a, b, c}))
	after := waitDiskSnapshot(t, dir, "greeter", "a, b and c", 10*time.Second, func(s diskSnapshot) bool {
		return slices.Equal(s.addrs, all)
	})
	if after.Revision >= before.Revision {
		t.Fatalf("the new history's revision %d is not below the old one's %d: the test did not rewind", after.Revision, before.Revision)
	}
	t.Logf("snapshot file: revision %d (a, b) before the restart, %d (a, b, c) %v after it",
		before.Revision, after.Revision, time.Since(restarted).Round(time.Millisecond))

	// A later outage; a new process starts from the disk snapshot.
	fresh.Members()[0].Stop(t)
	disc2, err := etcd.NewDiscovery(fresh.Client(t), etcdopts.Discovery()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disc2.Close() })
	cold := dial(t, grpc.WithResolvers(resolver.NewBuilder(disc2, resolver.WithSnapshotDir(dir), resolver.WithLogger(quiet))), "muster:///greeter")
	start := time.Now()
	callUntil(t, cold, "every current server called from the disk snapshot", hasAll(all...))
	t.Logf("cold start from the disk snapshot during the outage: all 3 servers called within %v", time.Since(start).Round(time.Millisecond))
}

// etcd restored from a backup of the same cluster while no channel of the
// service was open: the Discovery follows the service afresh, so its first
// load starts the same generation the file was written in, at a revision
// below the file's. The file follows the restored history (the registry's
// latest snapshot is below the file too, so this is a rewind and not a
// channel behind the others), with the server registered after the
// restore.
func TestSnapshotFollowsARestoreOfTheSameCluster(t *testing.T) {
	dir := t.TempDir()
	c := etcdtest.Start(t)
	cli := c.Client(t)
	disc, bld, serve := snapshotSetup(t, cli, dir, etcdopts.Registrar(etcd.WithTTL(10*time.Second), etcd.WithAuditInterval(200*time.Millisecond))...)
	a := serve("a")
	backup := c.Backup(t) // etcd holds a
	b, cc := serve("b"), serve("c")
	// History after the backup: the file's revision ends up well above
	// what the restored etcd reaches with the re-registrations below.
	for i := range 50 {
		if _, err := cli.Put(ctxFor(t, 5*time.Second), "/other/key", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	conn := dial(t, grpc.WithResolvers(bld), "muster:///greeter")
	callUntil(t, conn, "the three servers called", hasAll(a, b, cc))
	three := slices.Sorted(slices.Values([]string{a, b, cc}))
	before := waitDiskSnapshot(t, dir, "greeter", "a, b and c", 10*time.Second, func(s diskSnapshot) bool {
		return slices.Equal(s.addrs, three)
	})
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for disc.Stats().Services != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the Discovery still follows %d services 10s after the last channel closed", disc.Stats().Services)
		}
		time.Sleep(10 * time.Millisecond) // no event tells that a service is no longer followed
	}

	c.Restore(t, backup) // same cluster ID, revisions back to the backup's
	restored := time.Now()
	d := serve("d") // once the registrar has put b and c back too
	all := slices.Sorted(slices.Values([]string{a, b, cc, d}))
	conn = dial(t, grpc.WithResolvers(bld), "muster:///greeter")
	callUntil(t, conn, "the four servers called after the restore", hasAll(all...))
	after := waitDiskSnapshot(t, dir, "greeter", "a, b, c and d", 10*time.Second, func(s diskSnapshot) bool {
		return slices.Equal(s.addrs, all)
	})
	if after.Revision >= before.Revision || after.Generation != before.Generation {
		t.Fatalf("after the restore the file is at generation %d, revision %d; before it %d, %d: the test did not reach a lower revision in the same generation",
			after.Generation, after.Revision, before.Generation, before.Revision)
	}
	t.Logf("snapshot file: generation %d, revision %d (a, b, c) before the restore, revision %d (a, b, c, d) %v after it",
		before.Generation, before.Revision, after.Revision, time.Since(restored).Round(time.Millisecond))
}
