package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "github.com/musterhq/muster/balancer/wrr"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/resolver"
)

func TestBalancerCollectorReportsPerEndpoint(t *testing.T) {
	good, bad := testbackend.Start(t), testbackend.Start(t)
	bad.SetFailing(true)
	bc := metrics.NewBalancerCollector(nil)
	pr := prometheus.NewPedanticRegistry()
	pr.MustRegister(bc)
	conn, err := grpc.NewClient("direct:///"+good.Addr+","+bad.Addr,
		grpc.WithResolvers(resolver.NewDirectBuilder()),
		grpc.WithStatsHandler(bc),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_wrr":{"outlier":{"consecutiveFailures":2,"baseEjectionTime":"30s","maxEjectionPercent":50}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Until both connections are up, every call may go to the failing
	// backend (the only ready one is never ejected) and fail at once: call
	// until the good backend has answered, then count.
	for deadline := time.Now().Add(10 * time.Second); good.Calls() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the good backend got no call within 10s")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = testbackend.Call(ctx, conn, grpc.WaitForReady(true))
		cancel()
	}
	for i := 0; i < 60; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = testbackend.Call(ctx, conn, grpc.WaitForReady(true))
		cancel()
	}
	values := gather(t, pr)
	if v := values["muster_balancer_calls_total"][good.Addr]; v == 0 {
		t.Fatalf("no calls counted for the good backend: %v", values)
	}
	if v := values["muster_balancer_failures_total"][bad.Addr]; v < 2 {
		t.Fatalf("failures of the failing backend = %v, want >= 2: %v", v, values)
	}
	if values["muster_balancer_ejections_total"][bad.Addr] < 1 || values["muster_balancer_ejected"][bad.Addr] != 1 {
		t.Fatalf("the failing backend is not reported ejected: %v", values)
	}
	if values["muster_balancer_ejected"][good.Addr] != 0 {
		t.Fatalf("the good backend is reported ejected: %v", values)
	}
	conn.Close()
	if values := gather(t, pr); len(values) != 0 {
		t.Fatalf("series left after the channel closed: %v", values)
	}
}

// gather returns metric name -> address -> value.
func gather(t *testing.T, g prometheus.Gatherer) map[string]map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if out[mf.GetName()] == nil {
				out[mf.GetName()] = map[string]float64{}
			}
			out[mf.GetName()][label(m, "address")] = value(m)
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}
