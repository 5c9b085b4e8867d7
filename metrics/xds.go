package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/musterhq/muster/xds"
)

// XDS returns a collector of an xDS control plane's counters, read from
// s.Stats at each scrape: muster_xds_clients (ADS streams served),
// muster_xds_services (services published), muster_xds_zones (client zones
// with their own endpoint priorities), muster_xds_requests_total,
// muster_xds_acks_total, muster_xds_nacks_total (each NACK is logged with the
// client's error detail), muster_xds_skipped_instances_total (instances xDS
// cannot carry), muster_xds_protected_updates_total (updates withheld by
// empty-list protection), muster_xds_self_check_violations_total (with
// xds.WithSelfCheck), muster_xds_refused_streams_total,
// muster_xds_refused_connections_total and
// muster_xds_refused_handshakes_total (beyond a bound on what clients may
// make the control plane hold), muster_xds_connections and
// muster_xds_handshakes (connections held, and those in their TLS
// handshake), muster_xds_subscription_bytes (what the
// streams' subscriptions are counted for, against
// xds.WithSubscriptionBudget) and muster_xds_pushes_total with labels "service"
// and "type" (listener, route, cluster, endpoints): resources sent, one per
// resource per response per stream.
func XDS(s *xds.Server, labels prometheus.Labels) prometheus.Collector {
	clients := desc("xds_clients", "ADS streams served: open, and admitted by their first request.", labels)
	services := desc("xds_services", "Services published.", labels)
	zones := desc("xds_zones", "Client zones served their own endpoint priorities.", labels)
	requests := desc("xds_requests_total", "Discovery requests received (first requests, ACKs and NACKs).", labels)
	acks := desc("xds_acks_total", "Discovery requests accepting a response.", labels)
	nacks := desc("xds_nacks_total", "Discovery requests rejecting a response (each logged with the client's error detail).", labels)
	skipped := desc("xds_skipped_instances_total", "Instances left out because xDS cannot express them (bad or duplicate address).", labels)
	protected := desc("xds_protected_updates_total", "Updates withheld by empty-list protection (the last good list kept).", labels)
	tlsReloads := desc("xds_tls_reloads_total", "Times the xDS listener's TLS files were read again after a change.", labels)
	tlsErrors := desc("xds_tls_reload_errors_total", "Changes of the xDS listener's TLS files that did not load (the last good certificate kept).", labels)
	forgotten := desc("xds_forgotten_services_total", "Services unpublished because they were gone from the registry.", labels)
	violations := desc("xds_self_check_violations_total", "Breaches of an xDS client's precondition found in published resources (with the self-check on; each logged).", labels)
	refused := desc("xds_refused_streams_total", "ADS streams ended for breaking a bound on what a client may make the control plane hold (each logged, rate-limited).", labels)
	refusedConns := desc("xds_refused_connections_total", "Connections closed as they came: their client held its share, or every place was taken.", labels)
	refusedHandshakes := desc("xds_refused_handshakes_total", "Connections closed as they came under TLS: their client held its share of the handshakes in progress, or every place was taken.", labels)
	conns := desc("xds_connections", "Client connections held (under TLS: those whose handshake succeeded).", labels)
	handshakes := desc("xds_handshakes", "Client connections in their TLS handshake.", labels)
	subscriptions := desc("xds_subscription_bytes", "What the open streams' subscriptions are counted for (each name's bytes and 64), against the subscription budget.", labels)
	pushes := desc("xds_pushes_total", "Resources sent to xDS clients, one per resource per response per stream.", labels, "service", "type")
	return &collector{
		descs: []*prometheus.Desc{clients, services, zones, requests, acks, nacks, skipped, protected, tlsReloads, tlsErrors, forgotten, violations, refused, refusedConns, refusedHandshakes, conns, handshakes, subscriptions, pushes},
		collect: func(ch chan<- prometheus.Metric) {
			st := s.Stats()
			ch <- gauge(clients, float64(st.Clients))
			ch <- gauge(services, float64(st.Services))
			ch <- gauge(zones, float64(len(st.Zones)))
			ch <- counter(requests, st.Requests)
			ch <- counter(acks, st.ACKs)
			ch <- counter(nacks, st.NACKs)
			ch <- counter(skipped, st.Skipped)
			ch <- counter(protected, st.Protected)
			ch <- counter(tlsReloads, st.TLSReloads)
			ch <- counter(tlsErrors, st.TLSReloadErrors)
			ch <- counter(forgotten, st.Forgotten)
			ch <- counter(violations, st.SelfCheckViolations)
			ch <- counter(refused, st.Refused)
			ch <- counter(refusedConns, st.RefusedConnections)
			ch <- counter(refusedHandshakes, st.RefusedHandshakes)
			ch <- gauge(conns, float64(st.Connections))
			ch <- gauge(handshakes, float64(st.Handshakes))
			ch <- gauge(subscriptions, float64(st.SubscriptionBytes))
			for svc, p := range st.Pushes {
				ch <- counter(pushes, p.Listeners, svc, "listener")
				ch <- counter(pushes, p.Routes, svc, "route")
				ch <- counter(pushes, p.Clusters, svc, "cluster")
				ch <- counter(pushes, p.Endpoints, svc, "endpoints")
			}
		},
	}
}
