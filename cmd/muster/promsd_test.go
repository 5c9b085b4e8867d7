package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// waitSDTargets polls url (Prometheus's HTTP service discovery) until it
// lists exactly the targets want.
func waitSDTargets(t *testing.T, url string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var last string
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(b)
			var groups []struct {
				Targets []string `json:"targets"`
			}
			if resp.StatusCode == http.StatusOK && json.Unmarshal(b, &groups) == nil {
				var got []string
				for _, g := range groups {
					got = append(got, g.Targets...)
				}
				if strings.Join(got, " ") == strings.Join(want, " ") {
					return
				}
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %s; want targets %v within %v", url, last, want, waitTimeout)
		}
		time.Sleep(50 * time.Millisecond) // an HTTP answer: no event to await
	}
}

// serve and console answer Prometheus's HTTP service discovery on their
// HTTP listeners.
func TestServeAndConsoleServePrometheusSD(t *testing.T) {
	urls := freeLoopbackURLs(t, 3)
	s, err := tryServe(t, serveOptions{dataDir: t.TempDir(), clientURL: urls[0], peerURL: urls[1], name: "test",
		metricsAddr: strings.TrimPrefix(urls[2], "http://")})
	if err != nil {
		t.Fatalf("serve did not start: %v", err)
	}
	defer s.stop(t)
	m := regexp.MustCompile(`Prometheus service discovery on (http://\S+)"?`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("serve's log does not say where the service discovery is:\n%s", s.stderr)
	}
	reg := newRegistrar(t, s.endpoint)
	register(t, reg, registry.Instance{Name: "payments", Addr: "10.0.0.1:9001", Metadata: map[string]string{"metrics": ":9100"}})
	waitSDTargets(t, strings.TrimSuffix(m[1], `"`), "10.0.0.1:9100")

	ui := startConsole(t, s.endpoint, consoleOptions{listen: "127.0.0.1:0"})
	sd := strings.TrimSuffix(ui, consolePath) + prometheusSDPath
	waitSDTargets(t, sd+"?service=payments", "10.0.0.1:9100")
	waitSDTargets(t, sd+"?service=other")
}

// muster promsd answers Prometheus's HTTP service discovery as an etcd
// user that may only read the services' prefix, with no console beside
// it.
func TestPromSDReadsOnly(t *testing.T) {
	s := newSecureRegistry(t)
	addUser(t, s.c.Client(t), "prometheus", "prom-pw", registry.DefaultPrefix+"/", clientv3.PermissionType(clientv3.PermRead))
	register(t, s.r, registry.Instance{ID: "user-2", Name: "user", Addr: "10.0.0.2:9000", Metadata: map[string]string{"metrics": ":9100"}})
	sd := startReading(t, false, s.args([]string{"promsd"}, "--user", "prometheus:prom-pw", "--listen", "127.0.0.1:0")...)
	url := waitLogged(t, sd.stderr, `Prometheus service discovery on (http://\S+)`)
	url = strings.TrimSuffix(strings.TrimSuffix(url, `"`), ",")
	waitSDTargets(t, url, "10.0.0.2:9100")
	// Ready once the services were read (docs/HEALTH.md).
	resp, err := http.Get(strings.TrimSuffix(url, prometheusSDPath) + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"user"`) {
		t.Fatalf("promsd's /readyz: %s %s; want 200 naming the service user", resp.Status, body)
	}
	// The user may not write: the role is what the docs recommend.
	if r := run(s.args([]string{"drain", "user", "user-2"}, "--user", "prometheus:prom-pw")...); r.code != exitFailure || !strings.Contains(r.stderr, "permission denied") {
		t.Fatalf("drain as prometheus: exit code %d, stderr %q; want a permission error", r.code, r.stderr)
	}
}
