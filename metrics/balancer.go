package metrics

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	estats "google.golang.org/grpc/experimental/stats"
	"google.golang.org/grpc/stats"
)

// BalancerCollector collects the per-endpoint metrics of Muster's
// balancers (muster_p2c, muster_wrr) on the channels it is given to:
// muster_balancer_calls_total, muster_balancer_failures_total,
// muster_balancer_ejections_total and muster_balancer_ejected, labelled by
// target, policy and address.
//
// It is a gRPC stats handler that implements gRPC's metrics recorder
// interface, the way balancers hand their metrics to a channel: give it to
// each channel with grpc.WithStatsHandler, and register it with Prometheus.
// Values are read from the balancers when Prometheus scrapes; the
// collector does nothing per call.
//
//	bc := metrics.NewBalancerCollector(nil)
//	prometheus.MustRegister(bc)
//	conn, err := grpc.NewClient("muster:///user", grpc.WithStatsHandler(bc), ...)
//
// # Experimental
//
// It relies on grpc-go's experimental metrics recorder API.
type BalancerCollector struct {
	estats.UnimplementedMetricsRecorder

	descs map[string]balancerMetric

	mu        sync.Mutex
	reporters map[int]estats.AsyncMetricReporter
	next      int
}

type balancerMetric struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
}

var (
	_ prometheus.Collector   = (*BalancerCollector)(nil)
	_ stats.Handler          = (*BalancerCollector)(nil)
	_ estats.MetricsRecorder = (*BalancerCollector)(nil)
)

// NewBalancerCollector returns a collector; labels are constant labels
// added to every series.
func NewBalancerCollector(labels prometheus.Labels) *BalancerCollector {
	vars := []string{"target", "policy", "address"}
	mk := func(name, help string, kind prometheus.ValueType) balancerMetric {
		return balancerMetric{desc: prometheus.NewDesc("muster_balancer_"+name, help, vars, labels), kind: kind}
	}
	return &BalancerCollector{
		descs: map[string]balancerMetric{
			"muster.lb.calls":     mk("calls_total", "Calls an endpoint completed with a result.", prometheus.CounterValue),
			"muster.lb.failures":  mk("failures_total", "Calls to an endpoint that failed in a way that counts toward ejection.", prometheus.CounterValue),
			"muster.lb.ejections": mk("ejections_total", "Times an endpoint was ejected by outlier detection.", prometheus.CounterValue),
			"muster.lb.ejected":   mk("ejected", "1 while an endpoint is ejected.", prometheus.GaugeValue),
		},
		reporters: map[int]estats.AsyncMetricReporter{},
	}
}

// RegisterAsyncReporter is called by a balancer to report its metrics when
// they are collected. It implements estats.MetricsRecorder.
func (c *BalancerCollector) RegisterAsyncReporter(r estats.AsyncMetricReporter, _ ...estats.AsyncMetric) func() {
	c.mu.Lock()
	id := c.next
	c.next++
	c.reporters[id] = r
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			delete(c.reporters, id)
			c.mu.Unlock()
		})
	}
}

// Describe implements prometheus.Collector.
func (c *BalancerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.descs {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector: it asks every live balancer for
// its endpoints' values.
func (c *BalancerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reporters := make([]estats.AsyncMetricReporter, 0, len(c.reporters))
	for _, r := range c.reporters {
		reporters = append(reporters, r)
	}
	c.mu.Unlock()
	rec := asyncRecorder{c: c, ch: ch}
	for _, r := range reporters {
		_ = r.Report(rec)
	}
}

type asyncRecorder struct {
	c  *BalancerCollector
	ch chan<- prometheus.Metric
}

func (a asyncRecorder) RecordInt64AsyncGauge(h *estats.Int64AsyncGaugeHandle, v int64, labels ...string) {
	m, ok := a.c.descs[h.Descriptor().Name]
	if !ok || len(labels) != 3 {
		return
	}
	a.ch <- prometheus.MustNewConstMetric(m.desc, m.kind, float64(v), labels...)
}

// TagRPC implements stats.Handler; it does nothing.
func (*BalancerCollector) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

// HandleRPC implements stats.Handler; it does nothing.
func (*BalancerCollector) HandleRPC(context.Context, stats.RPCStats) {}

// TagConn implements stats.Handler; it does nothing.
func (*BalancerCollector) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

// HandleConn implements stats.Handler; it does nothing.
func (*BalancerCollector) HandleConn(context.Context, stats.ConnStats) {}
