package promsd_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/promtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/promsd"
	"github.com/musterhq/muster/registry"
)

// metricsServer serves a Prometheus exposition on loopback, as a backend's
// metrics listener.
func metricsServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, "muster_test_backend_up 1")
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// upTargets returns the scrape URLs of the active targets that are up, by
// instance ID.
func upTargets(ts promtest.Targets) map[string]string {
	up := map[string]string{}
	for _, tg := range ts.Active {
		if tg.Health == "up" {
			up[tg.DiscoveredLabels["__meta_muster_id"]] = tg.ScrapeURL
		}
	}
	return up
}

// sdServer serves h at /prometheus/sd on loopback until the test ends.
func sdServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/prometheus/sd", h)
	sd := httptest.NewServer(mux)
	t.Cleanup(sd.Close)
	return sd
}

func TestPrometheusScrapesRegisteredBackends(t *testing.T) {
	promtest.Require(t)
	e := newEnv(t)
	sd := sdServer(t, e.h)

	backend := func(id string) (registry.Instance, string) {
		b := testbackend.Start(t)
		m := metricsServer(t)
		return registry.Instance{Name: "greeter", ID: id, Addr: b.Addr, Zone: "z1",
			Metadata: map[string]string{promsd.MetadataKey: m, "team.name": "core"}}, "http://" + m + "/metrics"
	}
	in1, url1 := backend("b1")
	in2, url2 := backend("b2")
	e.register(t, in1)
	e.register(t, in2)
	prom := promtest.Start(t, promtest.HTTPSDJob("muster", sd.URL+"/prometheus/sd", ""))

	ts := prom.WaitTargets(t, 30*time.Second, "scraping b1 and b2", func(ts promtest.Targets) bool {
		up := upTargets(ts)
		return len(ts.Active) == 2 && up["b1"] == url1 && up["b2"] == url2
	})
	for _, tg := range ts.Active {
		if tg.DiscoveredLabels["__meta_muster_service"] != "greeter" || tg.DiscoveredLabels["__meta_muster_zone"] != "z1" ||
			tg.DiscoveredLabels["__meta_muster_metadata_team_name"] != "core" || tg.Labels["job"] != "muster" {
			t.Errorf("target %s: discovered labels %v, labels %v", tg.ScrapeURL, tg.DiscoveredLabels, tg.Labels)
		}
	}

	// A third backend registered later is scraped within two refresh
	// intervals, plus the period of Prometheus's own hand-over of
	// discovered targets to its scrapers and two seconds of slack for a
	// loaded machine; a deregistered one leaves as fast.
	const follow = 2*promtest.Interval + promtest.UpdatePeriod + 2*time.Second
	in3, url3 := backend("b3")
	e.register(t, in3)
	registered := time.Now()
	prom.WaitTargets(t, follow, "scraping b3", func(ts promtest.Targets) bool {
		return upTargets(ts)["b3"] == url3
	})
	t.Logf("b3 scraped %v after its registration", time.Since(registered).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.reg.Deregister(ctx, "greeter", "b1"); err != nil {
		t.Fatal(err)
	}
	prom.WaitTargets(t, follow, "dropping b1 after its deregistration", func(ts promtest.Targets) bool {
		up := upTargets(ts)
		return len(ts.Active) == 2 && up["b2"] == url2 && up["b3"] == url3
	})
}

// putInstances writes n instances of service straight into etcd, without
// a lease, in transactions of 100 keys: what a fleet of registrars would
// have written. Instance i listens on 10.x.y.z:8080 and serves metrics on
// :9100.
func putInstances(t testing.TB, cli *clientv3.Client, service string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for lo := 0; lo < n; lo += 100 {
		var ops []clientv3.Op
		for i := lo; i < min(n, lo+100); i++ {
			in := registry.Instance{Name: service, ID: fmt.Sprintf("i%05d", i),
				Addr: fmt.Sprintf("10.%d.%d.%d:8080", i>>16&255, i>>8&255, i&255), Zone: "z" + fmt.Sprint(i%3),
				Region: "r1", Version: "v1.2.3",
				Metadata: map[string]string{promsd.MetadataKey: ":9100", "color": "blue", "team": "core"}}
			v, err := registry.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, clientv3.OpPut(registry.Key(registry.DefaultPrefix, service, in.ID), string(v)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPrometheusReadsTenThousandTargets has Prometheus itself parse the
// answer for 10,000 instances (the benchmark's), dropping every target by
// relabelling so that nothing is scraped.
func TestPrometheusReadsTenThousandTargets(t *testing.T) {
	promtest.Require(t)
	const n = 10000
	e := newEnv(t)
	putInstances(t, e.c.Client(t), "big", n)
	sd := httptest.NewServer(e.h)
	t.Cleanup(sd.Close)
	waitStats(t, e.h, n)
	prom := promtest.Start(t, promtest.HTTPSDJob("muster", sd.URL,
		"    relabel_configs:\n      - source_labels: [__meta_muster_service]\n        regex: big\n        action: drop\n"))
	ts := prom.WaitTargets(t, 120*time.Second, fmt.Sprintf("reading %d dropped targets", n), func(ts promtest.Targets) bool {
		return len(ts.Dropped) == n
	})
	seen := map[string]bool{}
	for _, tg := range ts.Dropped {
		l := tg.DiscoveredLabels
		if l["__meta_muster_service"] != "big" || l["__meta_muster_metadata_team"] != "core" || l["__address__"] == "" {
			t.Fatalf("dropped target with labels %v", l)
		}
		seen[l["__meta_muster_id"]] = true
	}
	if len(seen) != n || len(ts.Active) != 0 {
		t.Errorf("%d distinct instances, %d active targets; want %d and 0", len(seen), len(ts.Active), n)
	}
}

// waitStats waits until h serves n targets.
func waitStats(t testing.TB, h *promsd.Handler, n int) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for h.Stats().Targets != n {
		if time.Now().After(deadline) {
			t.Fatalf("Stats = %+v, want %d targets within 120s", h.Stats(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recipe returns the scrape job of docs/PROMETHEUS.md's prometheus.yml as
// written, with its discovery URL replaced by url and its refresh interval
// by promtest's (the test's only changes).
func recipe(t *testing.T, url string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/PROMETHEUS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## prometheus.yml\n")
	_, after, ok1 := strings.Cut(section, "```yaml\n")
	block, _, ok2 := strings.Cut(after, "```")
	ok = ok && ok1
	job, ok3 := strings.CutPrefix(block, "scrape_configs:\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/PROMETHEUS.md: no yaml block starting with scrape_configs under \"prometheus.yml\"")
	}
	for old, repl := range map[string]string{
		"url: http://127.0.0.1:2381/prometheus/sd": "url: " + url,
		"refresh_interval: 30s":                    "refresh_interval: " + promtest.Interval.String(),
	} {
		if strings.Count(job, old) != 1 {
			t.Fatalf("docs/PROMETHEUS.md's job has %d of %q, want 1:\n%s", strings.Count(job, old), old, job)
		}
		job = strings.Replace(job, old, repl, 1)
	}
	return job
}

// docs/PROMETHEUS.md's configuration, as written, in a real Prometheus:
// an instance registered with metadata naming Prometheus's own labels
// (__address__, __metrics_path__, __scheme__, __param_service) and another
// target's identity (job, instance) is scraped at its own metrics address
// and path, labelled with its own service and ID; its honest neighbour's
// metadata becomes labels; draining instances are dropped.
func TestPrometheusRecipe(t *testing.T) {
	promtest.Require(t)
	e := newEnv(t)
	sd := sdServer(t, e.h)

	honest, poisoned, elsewhere := metricsServer(t), metricsServer(t), metricsServer(t)
	e.register(t, registry.Instance{Name: "greeter", ID: "b1", Addr: testbackend.Start(t).Addr, Zone: "z1",
		Metadata: map[string]string{promsd.MetadataKey: honest, "team": "core"}})
	e.register(t, registry.Instance{Name: "greeter", ID: "b2", Addr: testbackend.Start(t).Addr, Zone: "z1",
		Metadata: map[string]string{promsd.MetadataKey: poisoned, "team": "core",
			"__address__": elsewhere, "__metrics_path__": "/forged", "__scheme__": "https", "__param_service": "payments",
			"job": "payments", "instance": "payments-1"}})
	e.register(t, registry.Instance{Name: "greeter", ID: "b3", Addr: testbackend.Start(t).Addr, Draining: true,
		Metadata: map[string]string{promsd.MetadataKey: metricsServer(t)}})
	prom := promtest.Start(t, recipe(t, sd.URL+"/prometheus/sd"))

	want := map[string]string{"b1": "http://" + honest + "/metrics", "b2": "http://" + poisoned + "/metrics"}
	ts := prom.WaitTargets(t, 30*time.Second, "scraping b1 and b2 at their own addresses", func(ts promtest.Targets) bool {
		up := map[string]string{}
		for _, tg := range ts.Active {
			if tg.Health == "up" {
				up[tg.Labels["instance"]] = tg.ScrapeURL
			}
		}
		return len(ts.Active) == 2 && up["b1"] == want["b1"] && up["b2"] == want["b2"]
	})
	for _, tg := range ts.Active {
		l := tg.Labels
		if l["job"] != "greeter" || l["zone"] != "z1" || l["team"] != "core" || tg.ScrapeURL != want[l["instance"]] {
			t.Errorf("target %s: labels %v, want job greeter, zone z1, team core, scraped at its own address", tg.ScrapeURL, l)
		}
	}
	if st := e.h.Stats(); st.SkippedLabels != 6 {
		t.Errorf("Stats %+v, want 6 metadata keys left out (b2's)", st)
	}
}
