package etcd_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// TestCompactedWatchReloads reaches the compaction branch of the watch loop
// with the watch live: the member the Discovery's client talks to (its only
// endpoint) is killed, an instance is deleted and another added through the
// other members, the store is compacted past the Discovery's revision, and
// the member comes back well within the silence limit. The etcd client
// resumes the watch by itself from the revision after the last it
// delivered, which is compacted: etcd answers with the compaction revision.
// The Discovery must reload (counted in CompactionReloads, no silence
// reload) and end equal to etcd. Resuming from the compaction revision
// instead would miss the delete, which came before it.
func TestCompactedWatchReloads(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithSize(3))
	leader := c.WaitLeader(t)
	members := c.Members()
	x := members[(leader+1)%3] // a follower: no election to wait for
	var others []string
	for _, m := range members {
		if m != x {
			others = append(others, m.DirectEndpoint())
		}
	}
	writer := c.Client(t, others...)
	// A long progress interval: the silence limit (2.5 intervals) is far
	// beyond the outage, so only the compaction can end the watch.
	const every = 6 * time.Second
	d := newDiscovery(t, c.Client(t, x.Endpoint()), disc("/p", etcd.WithProgressInterval(every))...)
	ctx := ctxFor(t, 60*time.Second)

	putInstance(t, writer, "/p", instance("svc", "a", 9000))
	putInstance(t, writer, "/p", instance("svc", "b", 9001))
	w, err := d.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "a and b", registrytest.HasIDs("a", "b"))
	st0 := d.Stats()

	killed, back := compactBehind(t, c, x, writer, every, func() {
		if _, err := writer.Delete(ctx, registry.Key("/p", "svc", "a")); err != nil {
			t.Fatal(err)
		}
		putInstance(t, writer, "/p", instance("svc", "c", 9002))
	})

	s := registrytest.WaitForWithin(t, w, 2*every, "b and c, fresh", func(s registry.Snapshot) bool {
		return registrytest.HasIDs("b", "c")(s) && !s.Stale()
	})
	t.Logf("member back %v after the kill; snapshot fresh %v after the kill", back.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	st := d.Stats()
	if st.CompactionReloads <= st0.CompactionReloads {
		t.Fatalf("CompactionReloads = %d, was %d: the compaction branch was not taken (stats %+v)", st.CompactionReloads, st0.CompactionReloads, st)
	}
	if st.SilenceReloads != st0.SilenceReloads {
		t.Fatalf("SilenceReloads rose from %d to %d: the watch was given up for silence, not compaction", st0.SilenceReloads, st.SilenceReloads)
	}
	keys, _ := rawKeys(t, writer, "/p/svc/")
	var ids []string
	for _, k := range keys {
		ids = append(ids, strings.TrimPrefix(k, "/p/svc/"))
	}
	if got := registrytest.IDs(s); !slices.Equal(got, ids) {
		t.Fatalf("cache %v, etcd %v", got, ids)
	}
}

// compactBehind kills x, the only member a watch's client talks to, makes
// the changes change makes through writer (the other members), writes ten
// other keys so that the last revisions before the compaction are not the
// watched ones, compacts the store and restarts x. It fails the test if x
// was not back well within the silence limit of the progress interval
// every, where a silence could end the watch instead of the compaction.
// It returns when x was killed and how long it was gone.
func compactBehind(t *testing.T, c *etcdtest.Cluster, x *etcdtest.Member, writer *clientv3.Client, every time.Duration, change func()) (time.Time, time.Duration) {
	t.Helper()
	killed := time.Now()
	x.Kill(t)
	change()
	for i := 0; i < 10; i++ {
		putRaw(t, writer, "/other/k", fmt.Sprint(i))
	}
	c.Compact(t)
	x.Restart(t)
	back := time.Since(killed)
	if back > 2*every {
		t.Fatalf("the member took %v to come back, beyond the silence limit (%v): the test cannot tell the compaction path from a silence", back, 5*every/2)
	}
	return killed, back
}
