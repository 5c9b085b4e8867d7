package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.LeakOptions()...) }

func TestCollectorsReportState(t *testing.T) {
	quiet := etcd.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := etcdtest.Start(t)
	cli := c.Client(t)
	reg, err := etcd.NewRegistrar(cli, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	disc, err := etcd.NewDiscovery(cli, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer disc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"a", "b"} {
		if err := reg.Register(ctx, registry.Instance{Name: "user", ID: id, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, registry.Key(registry.DefaultPrefix, "user", "bad"), "garbage"); err != nil {
		t.Fatal(err)
	}
	w, err := disc.Watch(ctx, "user")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	registrytest.WaitFor(t, w, "a, b", registrytest.HasIDs("a", "b"))

	pr := prometheus.NewPedanticRegistry()
	pr.MustRegister(
		metrics.Registrar(reg, prometheus.Labels{"registrar": "main"}),
		metrics.Discovery(disc, nil),
		metrics.Resolver(resolver.NewBuilder(disc), nil),
	)
	want := `
# HELP muster_discovery_instances Instances in a service's snapshot.
# TYPE muster_discovery_instances gauge
muster_discovery_instances{service="user"} 2
# HELP muster_discovery_skipped_values_total Registry values skipped because they were malformed, of an unknown version, or did not match their key.
# TYPE muster_discovery_skipped_values_total counter
muster_discovery_skipped_values_total 1
# HELP muster_discovery_stale_seconds How long a service's snapshot has been stale (etcd unreachable or silent); 0 while fresh.
# TYPE muster_discovery_stale_seconds gauge
muster_discovery_stale_seconds{service="user"} 0
# HELP muster_registrar_instances Instances in the registrar's set.
# TYPE muster_registrar_instances gauge
muster_registrar_instances{registrar="main"} 2
# HELP muster_registrar_registered 1 while every instance of the registrar is written under a live lease.
# TYPE muster_registrar_registered gauge
muster_registrar_registered{registrar="main"} 1
# HELP muster_resolver_protected_updates_total Updates withheld by empty-list protection (the last good list kept).
# TYPE muster_resolver_protected_updates_total counter
muster_resolver_protected_updates_total 0
`
	if err := testutil.GatherAndCompare(pr, strings.NewReader(want),
		"muster_discovery_instances", "muster_discovery_skipped_values_total", "muster_discovery_stale_seconds",
		"muster_registrar_instances", "muster_registrar_registered", "muster_resolver_protected_updates_total"); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(pr)
	if err != nil {
		t.Fatal(err)
	}
	if n != 16 {
		t.Fatalf("%d series gathered, want 16", n)
	}

	// A lease revoked from outside: counted as a revocation, followed by a
	// re-registration.
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(reg.Status().Session)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if st := reg.Status(); st.Reregistrations == 1 && st.Registered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not registered again within 5s of the revocation (status %+v)", reg.Status())
		}
		time.Sleep(10 * time.Millisecond) // the registrar's keepalive sees the revocation; nothing to await from outside
	}
	want = `
# HELP muster_registrar_reregistrations_total Leases lost and re-granted, with every instance written again.
# TYPE muster_registrar_reregistrations_total counter
muster_registrar_reregistrations_total{registrar="main"} 1
# HELP muster_registrar_revocations_total Leases etcd ended while they were kept alive (revoked by hand, or by a member that led the cluster and was paused for longer than the TTL).
# TYPE muster_registrar_revocations_total counter
muster_registrar_revocations_total{registrar="main"} 1
`
	if err := testutil.GatherAndCompare(pr, strings.NewReader(want),
		"muster_registrar_reregistrations_total", "muster_registrar_revocations_total"); err != nil {
		t.Fatal(err)
	}
}
