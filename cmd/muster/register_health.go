package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/registry"
)

// sidecarStateNames are the values of muster_register_state's label
// state, by sidecarState.
var sidecarStateNames = [...]string{unregistered: "unregistered", serving: "registered", drained: "drained"}

var (
	checksDesc = prometheus.NewDesc("muster_register_checks_total",
		"Health checks (--check) run, by result: pass or fail.", []string{"result"}, nil)
	stateDesc = prometheus.NewDesc("muster_register_state",
		"1 for the state the sidecar keeps its instance in (unregistered: no check has passed for --warmup yet; "+
			"registered; drained: --failures checks failed in a row), 0 for the others.", []string{"state"}, nil)
	etcdFailuresDesc = prometheus.NewDesc("muster_register_etcd_failures_total",
		"Failed attempts to reach etcd (muster_registrar_failures_total), by the cause of the registrar's last error "+
			"when they were seen: unavailable, timeout, auth, alarm or other.", []string{"cause"}, nil)
)

// sidecarWatch is what muster register shows of its sidecar while it runs:
// its metrics and its health. The sidecar's loop writes it; the HTTP
// server's goroutines read it. Its methods are safe for concurrent use.
type sidecarWatch struct {
	name  string // the service
	reg   registry.StatusReporter
	stuck time.Duration // /livez fails when the loop has not turned for this long

	state      atomic.Int32 // a sidecarState
	registered atomic.Bool  // the instance was registered once
	beat       atomic.Int64 // when the loop last turned, in Unix nanoseconds
	passed     atomic.Uint64
	failed     atomic.Uint64

	mu       sync.Mutex
	failures uint64            // the registrar's Failures counted so far
	cause    string            // the cause of the last error seen
	byCause  map[string]uint64 // failures counted, by cause
}

var _ prometheus.Collector = (*sidecarWatch)(nil)

func newSidecarWatch(name string, reg registry.StatusReporter, stuck time.Duration) *sidecarWatch {
	w := &sidecarWatch{name: name, reg: reg, stuck: stuck, cause: health.CauseOther, byCause: map[string]uint64{}}
	w.turned()
	return w
}

// turned records that the sidecar's loop turned: it lives.
func (w *sidecarWatch) turned() { w.beat.Store(time.Now().UnixNano()) }

// checked counts a health check's result.
func (w *sidecarWatch) checked(err error) {
	if err != nil {
		w.failed.Add(1)
	} else {
		w.passed.Add(1)
	}
}

// status reads the registrar's status and counts its new failures under
// the cause of its last error (the cause last seen when it has none).
func (w *sidecarWatch) status() registry.RegistrarStatus {
	st := w.reg.Status()
	if st.Registered {
		w.registered.Store(true)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := health.Cause(st.LastError); c != "" {
		w.cause = c
	}
	if st.Failures > w.failures {
		w.byCause[w.cause] += st.Failures - w.failures
		w.failures = st.Failures
	}
	return st
}

// live is /livez: an error once the loop has not turned for w.stuck.
func (w *sidecarWatch) live() error {
	if idle := time.Since(time.Unix(0, w.beat.Load())); idle > w.stuck {
		return fmt.Errorf("register: the sidecar's loop has not turned for %v", idle.Round(time.Second))
	}
	return nil
}

// health is /readyz's state: waiting until the instance was registered
// once; then its registration, stale while etcd does not hold it (since
// the registration was lost) or while the registrar's last attempt failed.
func (w *sidecarWatch) health() health.State {
	st := w.status()
	svc := health.Service{Name: w.name, Instances: st.Instances, Loaded: w.registered.Load()}
	switch {
	case !st.Registered && svc.Loaded:
		svc.StaleSince = st.Since
	case st.LastError != nil:
		svc.StaleSince = st.LastErrorAt
	}
	switch {
	case st.LastError != nil:
		svc.Error, svc.Cause = st.LastError.Error(), health.Cause(st.LastError)
	case svc.Loaded && !st.Registered: // between two attempts
		w.mu.Lock()
		svc.Error, svc.Cause = "the registration was lost; registering again", w.cause
		w.mu.Unlock()
	}
	out := health.State{Services: []health.Service{svc}}
	switch {
	case svc.Loaded:
	case sidecarState(w.state.Load()) == unregistered:
		out.Waiting = "the health check (--check) to pass (for --warmup, if given)"
	default:
		out.Waiting = "etcd to take the registration"
	}
	return out
}

// Describe implements prometheus.Collector.
func (w *sidecarWatch) Describe(ch chan<- *prometheus.Desc) {
	ch <- checksDesc
	ch <- stateDesc
	ch <- etcdFailuresDesc
}

// Collect implements prometheus.Collector.
func (w *sidecarWatch) Collect(ch chan<- prometheus.Metric) {
	w.status()
	ch <- prometheus.MustNewConstMetric(checksDesc, prometheus.CounterValue, float64(w.passed.Load()), "pass")
	ch <- prometheus.MustNewConstMetric(checksDesc, prometheus.CounterValue, float64(w.failed.Load()), "fail")
	now := sidecarState(w.state.Load())
	for s, name := range sidecarStateNames {
		v := 0.0
		if sidecarState(s) == now {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, v, name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range health.Causes() {
		ch <- prometheus.MustNewConstMetric(etcdFailuresDesc, prometheus.CounterValue, float64(w.byCause[c]), c)
	}
}
