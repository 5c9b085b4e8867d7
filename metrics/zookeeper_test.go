package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
)

// A ZooKeeper Discovery is collected like an etcd one: its followed
// services, watchers and loads, and a reload after a lost connection
// counted as a resync.
func TestDiscoveryCollectsZooKeeper(t *testing.T) {
	c := zktest.Start(t)
	opts := []zookeeper.Option{zookeeper.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), zookeeper.WithSessionTimeout(5 * time.Second)}
	r, err := zookeeper.NewRegistrar(c.Addrs(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := zookeeper.NewDiscovery(c.Addrs(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// A JVM on a loaded 2-core machine can take seconds per request.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range []string{"a", "b"} {
		if err := r.Register(ctx, registry.Instance{Name: "user", ID: id, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := d.Watch(ctx, "user")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "a, b", registrytest.HasIDs("a", "b"))

	pr := prometheus.NewPedanticRegistry()
	pr.MustRegister(metrics.Discovery(d, nil))
	want := `
# HELP muster_discovery_instances Instances in a service's snapshot.
# TYPE muster_discovery_instances gauge
muster_discovery_instances{service="user"} 2
# HELP muster_discovery_loads_total Full reads of a service.
# TYPE muster_discovery_loads_total counter
muster_discovery_loads_total 1
# HELP muster_discovery_resyncs_total Full reloads after a watch ended (error, compaction, silence, lost connection).
# TYPE muster_discovery_resyncs_total counter
muster_discovery_resyncs_total 0
# HELP muster_discovery_skipped_values_total Registry values skipped because they were malformed, of an unknown version, or did not match their key.
# TYPE muster_discovery_skipped_values_total counter
muster_discovery_skipped_values_total 0
# HELP muster_discovery_stale_seconds How long a service's snapshot has been stale (etcd unreachable or silent); 0 while fresh.
# TYPE muster_discovery_stale_seconds gauge
muster_discovery_stale_seconds{service="user"} 0
# HELP muster_discovery_watchers Open watchers.
# TYPE muster_discovery_watchers gauge
muster_discovery_watchers 1
`
	if err := testutil.GatherAndCompare(pr, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	// The connection breaks: the service is read again, a resync.
	c.Servers()[0].Reset()
	registrytest.WaitForWithin(t, w, 60*time.Second, "read again after the reset", func(s registry.Snapshot) bool {
		return d.DiscoveryStats().Resyncs > 0 && !s.Stale() && registrytest.HasIDs("a", "b")(s)
	})
	st := d.DiscoveryStats()
	want = fmt.Sprintf(`
# HELP muster_discovery_loads_total Full reads of a service.
# TYPE muster_discovery_loads_total counter
muster_discovery_loads_total %d
# HELP muster_discovery_resyncs_total Full reloads after a watch ended (error, compaction, silence, lost connection).
# TYPE muster_discovery_resyncs_total counter
muster_discovery_resyncs_total %d
`, st.Loads, st.Resyncs)
	if st.Resyncs != st.Loads-1 {
		t.Fatalf("stats %+v: want every load after the first counted as a resync", st)
	}
	if err := testutil.GatherAndCompare(pr, strings.NewReader(want), "muster_discovery_loads_total", "muster_discovery_resyncs_total"); err != nil {
		t.Fatal(err)
	}
}
