package etcdtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// watcherMetric is the embedded server's gauge of open watchers
// (go.etcd.io/etcd/server/v3/storage/mvcc/metrics.go).
const watcherMetric = "etcd_debugging_mvcc_watcher_total"

// WatcherCount returns the number of watchers open on all embedded etcd
// servers of the process, read from the servers' own Prometheus gauge
// etcd_debugging_mvcc_watcher_total in prometheus.DefaultGatherer. The
// gauge is process-wide and is not reset when a server stops, so tests
// should compare the value before and after an action. It fails the test if
// the gauge cannot be read.
func WatcherCount(t testing.TB) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	// Gather reports failures of unrelated collectors but still returns
	// what it gathered, so look for the gauge first.
	for _, mf := range mfs {
		if mf.GetName() != watcherMetric {
			continue
		}
		var n float64
		for _, m := range mf.GetMetric() {
			n += m.GetGauge().GetValue()
		}
		return n
	}
	if err != nil {
		t.Fatalf("etcdtest: WatcherCount: gather metrics: %v", err)
	}
	t.Fatalf("etcdtest: WatcherCount: metric %s is not registered", watcherMetric)
	return 0
}
