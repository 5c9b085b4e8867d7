package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// A scrape of /metrics over HTTP shows an xDS control plane's counters
// after a real grpc-go xDS client called a service through it.
func TestXDSCollectorScrape(t *testing.T) {
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
	be := testbackend.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := reg.Register(ctx, registry.Instance{Name: "greeter", ID: "a", Addr: be.Addr}); err != nil {
		t.Fatal(err)
	}

	cp, err := xds.New(disc, xds.WithServices("greeter"), xds.WithSelfCheck())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- cp.Serve(context.Background(), lis) }()
	defer func() {
		_ = cp.Close()
		<-served
	}()

	pr := prometheus.NewPedanticRegistry()
	pr.MustRegister(metrics.XDS(cp, prometheus.Labels{"cp": "main"}))
	hs := httptest.NewServer(promhttp.HandlerFor(pr, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer hs.Close()

	b, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,`+
		`"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":"m","locality":{"zone":"z1"}}}`, lis.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///greeter", grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := testbackend.Call(ctx, conn, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("call through xds:///greeter: %v", err)
	}

	// The client ACKs its last response after the call may have
	// succeeded: scrape until every resource type is acknowledged.
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(15 * time.Second); ; {
		fams = scrape(t, hs.URL)
		if seriesValue(fams, "muster_xds_acks_total", nil) >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15s, muster_xds_acks_total = %v, want >= 4 (one per resource type)", seriesValue(fams, "muster_xds_acks_total", nil))
		}
		time.Sleep(10 * time.Millisecond) // polling counters: no event to wait on
	}
	for _, w := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"muster_xds_clients", nil, 1},
		{"muster_xds_services", nil, 1},
		{"muster_xds_zones", nil, 1},
		{"muster_xds_nacks_total", nil, 0},
		{"muster_xds_skipped_instances_total", nil, 0},
		{"muster_xds_protected_updates_total", nil, 0},
		{"muster_xds_tls_reloads_total", nil, 0},
		{"muster_xds_tls_reload_errors_total", nil, 0},
		{"muster_xds_self_check_violations_total", nil, 0},
		{"muster_xds_forgotten_services_total", nil, 0},
		{"muster_xds_pushes_total", map[string]string{"service": "greeter", "type": "listener"}, 1},
		{"muster_xds_pushes_total", map[string]string{"service": "greeter", "type": "route"}, 1},
		{"muster_xds_pushes_total", map[string]string{"service": "greeter", "type": "cluster"}, 1},
		{"muster_xds_pushes_total", map[string]string{"service": "greeter", "type": "endpoints"}, 1},
	} {
		if got := seriesValue(fams, w.name, w.labels); got != w.want {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.want)
		}
	}
	if got := seriesValue(fams, "muster_xds_requests_total", nil); got < 8 {
		t.Errorf("muster_xds_requests_total = %v, want >= 8 (a request and an ACK per type)", got)
	}
	for _, m := range fams["muster_xds_clients"].GetMetric() {
		if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != "main" {
			t.Errorf("muster_xds_clients labels %v, want cp=main", m.GetLabel())
		}
	}

	conn.Close()
	for deadline := time.Now().Add(15 * time.Second); seriesValue(scrape(t, hs.URL), "muster_xds_clients", nil) != 0; {
		if time.Now().After(deadline) {
			t.Fatal("muster_xds_clients still not 0 15s after the client closed")
		}
		time.Sleep(10 * time.Millisecond) // polling counters: no event to wait on
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// seriesValue returns the value of the series of name whose labels include
// labels, or -1 if there is none.
func seriesValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			match = match && have[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
