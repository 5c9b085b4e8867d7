package main

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestServeExposesMetricsAndHealth(t *testing.T) {
	urls := freeLoopbackURLs(t, 2)
	s, err := tryServe(t, serveOptions{dataDir: t.TempDir(), clientURL: urls[0], peerURL: urls[1], name: "m", metricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`metrics on http://([0-9.:]+)/metrics`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no metrics address logged:\n%s", s.stderr)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + m[1] + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200", resp.StatusCode)
	}
	families := scrape(t, m[1])
	for _, name := range []string{"etcd_server_has_leader", "etcd_debugging_mvcc_keys_total", "go_goroutines"} {
		if families[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if v := families["etcd_server_has_leader"].GetMetric()[0].GetGauge().GetValue(); v != 1 {
		t.Errorf("etcd_server_has_leader = %v, want 1", v)
	}
}

// scrape returns the metric families of the /metrics at addr.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := (&http.Client{Timeout: waitTimeout}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return families
}
