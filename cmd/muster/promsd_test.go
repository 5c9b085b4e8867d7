package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

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
