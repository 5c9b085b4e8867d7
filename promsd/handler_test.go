package promsd_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/syncbuf"
	"github.com/musterhq/muster/promsd"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

type group struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// env is an etcd, a Registrar and a Handler over a Discovery, served on
// loopback.
type env struct {
	c   *etcdtest.Cluster
	reg *etcd.Registrar
	h   *promsd.Handler
	url string
}

func newEnv(t testing.TB, opts ...promsd.Option) *env {
	t.Helper()
	c := etcdtest.Start(t)
	cli := c.Client(t)
	reg, err := etcd.NewRegistrar(cli, etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	d, err := etcd.NewDiscovery(cli, etcdopts.Discovery()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	h, err := promsd.NewHandler(d, append([]promsd.Option{promsd.WithListInterval(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{c: c, reg: reg, h: h, url: srv.URL}
}

func (e *env) register(t testing.TB, in registry.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.reg.Register(ctx, in); err != nil {
		t.Fatalf("Register %s/%s: %v", in.Name, in.ID, err)
	}
}

// get returns the status and body of a GET of query.
func get(t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// waitTargets waits until the answer to query has exactly the targets
// want, in order, and returns its groups.
func waitTargets(t *testing.T, url string, want ...string) []group {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got []string
	for {
		code, _, body := get(t, url)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", url, code, body)
		}
		var gs []group
		if err := json.Unmarshal(body, &gs); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, body)
		}
		got = got[:0]
		for _, g := range gs {
			got = append(got, g.Targets...)
		}
		if reflect.DeepEqual(got, want) || len(got) == 0 && len(want) == 0 {
			return gs
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: targets %v, want %v within 10s", url, got, want)
		}
		time.Sleep(20 * time.Millisecond) // polling an HTTP answer: no event to await
	}
}

func TestTargetsLabelsAndFilter(t *testing.T) {
	e := newEnv(t)
	if code, h, body := get(t, e.url); code != http.StatusOK || string(body) != "[]" ||
		h.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("empty registry: %d %q %q, want 200 [] application/json", code, h.Get("Content-Type"), body)
	}
	e.register(t, registry.Instance{Name: "api", ID: "a1", Addr: "10.0.0.1:8080", Zone: "z1", Region: "r1", Version: "v2",
		Metadata: map[string]string{"metrics": ":9100", "color": "blue", "team.name": "core", "muster-x": "y"}})
	e.register(t, registry.Instance{Name: "api", ID: "a2", Addr: "10.0.0.2:8080", Draining: true,
		Metadata: map[string]string{"metrics": "metrics.local:9200"}})
	e.register(t, registry.Instance{Name: "api", ID: "a3", Addr: "10.0.0.3:8080"}) // no metrics: not a target
	e.register(t, registry.Instance{Name: "api", ID: "a4", Addr: "10.0.0.4:8080",
		Metadata: map[string]string{"metrics": "no port"}})
	e.register(t, registry.Instance{Name: "db", ID: "d1", Addr: "[::1]:5432", Metadata: map[string]string{"metrics": ":9187"}})

	gs := waitTargets(t, e.url, "10.0.0.1:9100", "metrics.local:9200", "[::1]:9187")
	want := map[string]string{
		"__meta_muster_service": "api", "__meta_muster_id": "a1", "__meta_muster_addr": "10.0.0.1:8080",
		"__meta_muster_zone": "z1", "__meta_muster_region": "r1", "__meta_muster_version": "v2",
		"__meta_muster_color": "blue", "__meta_muster_weight": "100", "__meta_muster_draining": "false",
		"__meta_muster_metadata_metrics": ":9100", "__meta_muster_metadata_color": "blue",
		"__meta_muster_metadata_team_name": "core", "__meta_muster_metadata_muster_x": "y",
	}
	if !reflect.DeepEqual(gs[0].Labels, want) {
		t.Errorf("labels of a1:\n got %v\nwant %v", gs[0].Labels, want)
	}
	if l := gs[1].Labels; l["__meta_muster_draining"] != "true" || l["__meta_muster_weight"] != "0" || l["__meta_muster_color"] != "" {
		t.Errorf("labels of the draining a2: %v", l)
	}
	// a4 adds no target, so the targets above may show before api's list
	// has it: api and db are watches of their own, and d1 may come first.
	deadline := time.Now().Add(10 * time.Second)
	for st := e.h.Stats(); st != (promsd.Stats{Services: 2, Targets: 3, SkippedTargets: 1}); st = e.h.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("Stats = %+v after 10s, want 2 services, 3 targets, 1 skipped", st)
		}
		time.Sleep(20 * time.Millisecond) // polling counts the handler's goroutines update: no event to await
	}

	waitTargets(t, e.url+"?service=db", "[::1]:9187")
	waitTargets(t, e.url+"?service=db&service=api", "10.0.0.1:9100", "metrics.local:9200", "[::1]:9187")
	waitTargets(t, e.url+"?service=db,nosuch", "[::1]:9187")
	code, _, body := get(t, e.url+"?service=db,Bad!")
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"Bad!"`) {
		t.Errorf("bad service name: %d %s, want 400 naming it", code, body)
	}
	resp, err := http.Post(e.url, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

func TestFollowsRegistryWithoutReadingPerRequest(t *testing.T) {
	e := newEnv(t)
	e.register(t, registry.Instance{Name: "api", ID: "a1", Addr: "127.0.0.1:8080", Metadata: map[string]string{"metrics": ":9100"}})
	waitTargets(t, e.url, "127.0.0.1:9100")

	// A new service is found by the next listing; a new instance of a
	// followed one by its watch.
	e.register(t, registry.Instance{Name: "web", ID: "w1", Addr: "127.0.0.2:8080", Metadata: map[string]string{"metrics": ":9100"}})
	e.register(t, registry.Instance{Name: "api", ID: "a2", Addr: "127.0.0.3:8080", Metadata: map[string]string{"metrics": ":9100"}})
	waitTargets(t, e.url, "127.0.0.1:9100", "127.0.0.3:9100", "127.0.0.2:9100")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.reg.Deregister(ctx, "web", "w1"); err != nil {
		t.Fatal(err)
	}
	waitTargets(t, e.url, "127.0.0.1:9100", "127.0.0.3:9100")
	deadline := time.Now().Add(10 * time.Second)
	for e.h.Stats().Services != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Stats = %+v: service web not forgotten within 10s of its last instance", e.h.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}

	before := e.c.RPCStats().Calls["/etcdserverpb.KV/Range"]
	for range 50 {
		get(t, e.url)
	}
	// The list loop may read the service list meanwhile: once per 100 ms.
	if after := e.c.RPCStats().Calls["/etcdserverpb.KV/Range"]; after-before > 20 {
		t.Errorf("50 requests made %d etcd reads; answers must come from the cache", after-before)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	c := etcdtest.Start(t)
	d, err := etcd.NewDiscovery(c.Client(t), etcdopts.Discovery()...)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for name, opt := range map[string]promsd.Option{
		"WithServices":     promsd.WithServices("ok", "Not OK"),
		"WithListInterval": promsd.WithListInterval(0),
		"WithLogger":       promsd.WithLogger(nil),
	} {
		if _, err := promsd.NewHandler(d, opt); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("NewHandler with a bad %s: error %v, want one naming it", name, err)
		}
	}
	if _, err := promsd.NewHandler(nil); err == nil {
		t.Error("NewHandler(nil): no error")
	}
}

func TestValidateMetricsAddr(t *testing.T) {
	for _, ok := range []string{":9100", "127.0.0.1:9100", "[::1]:1", "metrics.example.com:65535"} {
		if err := promsd.ValidateMetricsAddr(ok); err != nil {
			t.Errorf("ValidateMetricsAddr(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "9100", ":0", ":65536", "host:http", "a b:1", "a/b:1"} {
		if err := promsd.ValidateMetricsAddr(bad); err == nil || !strings.Contains(err.Error(), "promsd: metrics address") {
			t.Errorf("ValidateMetricsAddr(%q) = %v, want an error naming the metrics address", bad, err)
		}
	}
}

// syncBuffer is a buffer safe for the handler's goroutines.
type syncBuffer = syncbuf.Buffer

func TestBadMetricsAddressIsLoggedOnce(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, promsd.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	e.register(t, registry.Instance{Name: "api", ID: "bad", Addr: "127.0.0.1:8080", Metadata: map[string]string{"metrics": "9100"}})
	e.register(t, registry.Instance{Name: "api", ID: "a1", Addr: "127.0.0.1:8081", Metadata: map[string]string{"metrics": ":9100"}})
	waitTargets(t, e.url, "127.0.0.1:9100")
	// Each change of the service encodes it again; the bad instance, kept
	// as it was, is not logged again.
	e.register(t, registry.Instance{Name: "api", ID: "a2", Addr: "127.0.0.2:8081", Metadata: map[string]string{"metrics": ":9100"}})
	waitTargets(t, e.url, "127.0.0.1:9100", "127.0.0.2:9100")
	e.register(t, registry.Instance{Name: "api", ID: "bad", Addr: "127.0.0.1:8080", Version: "v2", Metadata: map[string]string{"metrics": "9100"}})
	e.register(t, registry.Instance{Name: "api", ID: "a3", Addr: "127.0.0.3:8081", Metadata: map[string]string{"metrics": ":9100"}})
	waitTargets(t, e.url, "127.0.0.1:9100", "127.0.0.2:9100", "127.0.0.3:9100")
	if n := strings.Count(logs.String(), "bad metrics address"); n != 1 || !strings.Contains(logs.String(), "id=bad") {
		t.Errorf("the bad address was logged %d times, want once:\n%s", n, logs.String())
	}
	if st := e.h.Stats(); st.SkippedTargets != 1 || st.Targets != 3 {
		t.Errorf("Stats = %+v, want 3 targets and 1 skipped", st)
	}
}

// A metadata key that could set Prometheus's own labels or the target's
// job or instance is left out of the labels, counted and logged once per
// instance; the instance stays a target with its other keys.
func TestUnsafeMetadataKeysLeftOut(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, promsd.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	md := map[string]string{"metrics": ":9100", "team": "core", "__address__": "10.9.9.9:80", "_x": "1", "9lives": "1",
		"job": "payments", "instance": "p-1", ".dot": "1"}
	e.register(t, registry.Instance{Name: "api", ID: "a1", Addr: "10.0.0.1:8080", Metadata: md})
	gs := waitTargets(t, e.url, "10.0.0.1:9100")
	for name := range gs[0].Labels {
		if rest, ok := strings.CutPrefix(name, "__meta_muster_metadata_"); ok && rest != "metrics" && rest != "team" {
			t.Errorf("label %s of an unsafe key", name)
		}
	}
	if gs[0].Labels["__meta_muster_metadata_team"] != "core" {
		t.Errorf("labels %v: the safe key team left out", gs[0].Labels)
	}
	e.register(t, registry.Instance{Name: "api", ID: "a2", Addr: "10.0.0.2:8080", Metadata: map[string]string{"metrics": ":9100"}})
	waitTargets(t, e.url, "10.0.0.1:9100", "10.0.0.2:9100")
	if st := e.h.Stats(); st.SkippedLabels != 6 || st.Targets != 2 {
		t.Errorf("Stats = %+v, want 2 targets and 6 keys left out", st)
	}
	if n := strings.Count(logs.String(), "metadata keys left out"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
	for _, k := range []string{"team", "color", "Team_2", "a.b"} {
		if !promsd.SafeKey(k) {
			t.Errorf("SafeKey(%q) = false", k)
		}
	}
}
