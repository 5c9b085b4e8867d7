package lb

import (
	estats "google.golang.org/grpc/experimental/stats"
)

// MetricLabels are the labels of every balancer metric, in order: the
// channel's target, the policy's name, the endpoint's address.
var MetricLabels = []string{"grpc.target", "muster.lb.policy", "muster.lb.address"}

// The balancers' per-endpoint metrics, registered in gRPC's metrics
// registry when the package is initialised: like balancer registration,
// it is gRPC's only mechanism. They are reported, at collection time, to
// the channel's metrics recorders (stats handlers that implement
// experimental/stats.MetricsRecorder, such as metrics.BalancerCollector);
// nothing is recorded on the pick path beyond a few atomic counters.
var (
	// CallsMetric counts an endpoint's calls that completed with a result.
	CallsMetric = estats.RegisterInt64AsyncGauge(estats.MetricDescriptor{
		Name: "muster.lb.calls", Unit: "{call}", Labels: MetricLabels,
		Description: "Calls an endpoint completed with a result (cumulative).",
	})
	// FailuresMetric counts an endpoint's failed calls.
	FailuresMetric = estats.RegisterInt64AsyncGauge(estats.MetricDescriptor{
		Name: "muster.lb.failures", Unit: "{call}", Labels: MetricLabels,
		Description: "Calls to an endpoint that failed in a way that counts toward ejection (cumulative).",
	})
	// EjectionsMetric counts an endpoint's ejections.
	EjectionsMetric = estats.RegisterInt64AsyncGauge(estats.MetricDescriptor{
		Name: "muster.lb.ejections", Unit: "{ejection}", Labels: MetricLabels,
		Description: "Times an endpoint was ejected by outlier detection (cumulative).",
	})
	// EjectedMetric is 1 while an endpoint is ejected.
	EjectedMetric = estats.RegisterInt64AsyncGauge(estats.MetricDescriptor{
		Name: "muster.lb.ejected", Unit: "{endpoint}", Labels: MetricLabels,
		Description: "1 while an endpoint is ejected, else 0.",
	})
	asyncMetrics = []estats.AsyncMetric{CallsMetric, FailuresMetric, EjectionsMetric, EjectedMetric}
)

// report records the per-endpoint metrics of the endpoints the balancer
// keeps.
func (b *Base[T]) report(r estats.AsyncMetricsRecorder) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.endpoints {
		o := &e.Outlier
		ejected := int64(0)
		if o.Ejected() {
			ejected = 1
		}
		calls := o.calls.Load()
		if b.policy.Calls != nil {
			calls = b.policy.Calls(e)
		}
		r.RecordInt64AsyncGauge(CallsMetric, int64(calls), b.target, b.policy.Name, e.Addr)
		r.RecordInt64AsyncGauge(FailuresMetric, int64(o.failed.Load()), b.target, b.policy.Name, e.Addr)
		r.RecordInt64AsyncGauge(EjectionsMetric, int64(o.ejections.Load()), b.target, b.policy.Name, e.Addr)
		r.RecordInt64AsyncGauge(EjectedMetric, ejected, b.target, b.policy.Name, e.Addr)
	}
	return nil
}
