// Package metrics exposes Muster's state as Prometheus collectors.
//
// Each collector reads a component's counters when it is scraped; nothing
// is counted on a hot path for it, and nothing is registered globally:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(
//		metrics.Registrar(registrar, nil),
//		metrics.Discovery(discovery, nil),
//		metrics.Resolver(builder, nil),
//	)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Give each collector constant labels when a process has several of one
// kind (two registrars, say), so that their series do not collide.
//
// The balancers' per-endpoint metrics (calls, failures, ejections) come
// through BalancerCollector, which channels take as a stats handler.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// collector is a Prometheus collector over a function that emits the
// metrics of one scrape.
type collector struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

func desc(name, help string, labels prometheus.Labels, variable ...string) *prometheus.Desc {
	return prometheus.NewDesc("muster_"+name, help, variable, labels)
}

func gauge(d *prometheus.Desc, v float64, lv ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
}

func counter(d *prometheus.Desc, v uint64, lv ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registrar returns a collector of a registrar's state:
// muster_registrar_registered (1 while every instance is written under a
// live session), muster_registrar_instances, muster_registrar_pending,
// muster_registrar_reregistrations_total (sessions lost and re-established),
// muster_registrar_revocations_total (sessions ended by the backend while
// kept alive), muster_registrar_repairs_total (instances written again
// after the backend lost them), muster_registrar_failures_total (failed
// attempts, each retried) and muster_registrar_refusals_total (the
// failures the backend refused for the registrar's identity).
func Registrar(r registry.StatusReporter, labels prometheus.Labels) prometheus.Collector {
	registered := desc("registrar_registered", "1 while every instance of the registrar is written under a live lease.", labels)
	instances := desc("registrar_instances", "Instances in the registrar's set.", labels)
	pending := desc("registrar_pending", "Instances not yet written under the current lease.", labels)
	rereg := desc("registrar_reregistrations_total", "Leases lost and re-granted, with every instance written again.", labels)
	revoked := desc("registrar_revocations_total", "Leases etcd ended while they were kept alive (revoked by hand, or by a member that led the cluster and was paused for longer than the TTL).", labels)
	repairs := desc("registrar_repairs_total", "Instances written again because etcd lost them while the lease lived (deleted by hand, lost in a restore).", labels)
	failures := desc("registrar_failures_total", "Failed attempts to reach etcd (each retried with backoff).", labels)
	refusals := desc("registrar_refusals_total", "Failed attempts etcd refused for the registrar's identity (password or token refused, permission denied).", labels)
	return &collector{
		descs: []*prometheus.Desc{registered, instances, pending, rereg, revoked, repairs, failures, refusals},
		collect: func(ch chan<- prometheus.Metric) {
			st := r.Status()
			ch <- gauge(registered, boolValue(st.Registered))
			ch <- gauge(instances, float64(st.Instances))
			ch <- gauge(pending, float64(st.Pending))
			ch <- counter(rereg, st.Reregistrations)
			ch <- counter(revoked, st.Revocations)
			ch <- counter(repairs, st.Repairs)
			ch <- counter(failures, st.Failures)
			ch <- counter(refusals, st.Refusals)
		},
	}
}

// Discovery returns a collector of a discovery's state:
// muster_discovery_watchers, muster_discovery_skipped_values_total
// (malformed or mismatched values, each counted once),
// muster_discovery_loads_total, muster_discovery_resyncs_total, and per
// service (label "service") muster_discovery_instances and
// muster_discovery_stale_seconds (0 while fresh). Every Muster Discovery
// reports them (etcd, ZooKeeper, Kubernetes: registry.StatsReporter); the
// help texts speak of etcd, the first backend, and hold for the others.
func Discovery(d registry.StatsReporter, labels prometheus.Labels) prometheus.Collector {
	watchers := desc("discovery_watchers", "Open watchers.", labels)
	skipped := desc("discovery_skipped_values_total", "Registry values skipped because they were malformed, of an unknown version, or did not match their key.", labels)
	loads := desc("discovery_loads_total", "Full reads of a service.", labels)
	resyncs := desc("discovery_resyncs_total", "Full reloads after a watch ended (error, compaction, silence, lost connection).", labels)
	instances := desc("discovery_instances", "Instances in a service's snapshot.", labels, "service")
	stale := desc("discovery_stale_seconds", "How long a service's snapshot has been stale (etcd unreachable or silent); 0 while fresh.", labels, "service")
	return &collector{
		descs: []*prometheus.Desc{watchers, skipped, loads, resyncs, instances, stale},
		collect: func(ch chan<- prometheus.Metric) {
			st := d.DiscoveryStats()
			ch <- gauge(watchers, float64(st.Watchers))
			ch <- counter(skipped, st.SkippedValues)
			ch <- counter(loads, st.Loads)
			ch <- counter(resyncs, st.Resyncs)
			now := time.Now()
			for _, s := range st.PerService {
				ch <- gauge(instances, float64(s.Instances), s.Name)
				age := 0.0
				if !s.StaleSince.IsZero() {
					age = now.Sub(s.StaleSince).Seconds()
				}
				ch <- gauge(stale, age, s.Name)
			}
		},
	}
}

// Resolver returns a collector of a resolver builder's counters:
// muster_resolver_updates_total (states pushed to channels) and
// muster_resolver_protected_updates_total (updates withheld by empty-list
// protection).
func Resolver(b *resolver.Builder, labels prometheus.Labels) prometheus.Collector {
	updates := desc("resolver_updates_total", "States pushed to gRPC channels.", labels)
	protected := desc("resolver_protected_updates_total", "Updates withheld by empty-list protection (the last good list kept).", labels)
	return &collector{
		descs: []*prometheus.Desc{updates, protected},
		collect: func(ch chan<- prometheus.Metric) {
			st := b.Stats()
			ch <- counter(updates, st.Updates)
			ch <- counter(protected, st.Protected)
		},
	}
}
