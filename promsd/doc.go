// Package promsd serves Prometheus's HTTP service discovery (http_sd_configs)
// of every instance in a registry.Discovery.
//
// A Handler follows services (those of WithServices, or every service the
// Discovery lists, listed again every WithListInterval) through watchers it
// keeps open, so each service's instances come from the Discovery's cache.
// On every change of a service it encodes that service's target groups once;
// a GET is answered by joining the encoded services, with no call to the
// registry.
//
// An instance is a target when its metadata key MetadataKey ("metrics")
// holds where its metrics are served, host:port (a bare :port takes the
// host of the instance's Addr). An instance without the key is not a
// target; one whose value does not parse is left out, counted
// (Stats.SkippedTargets) and logged once.
//
// Each target is a target group of its own, so that it carries its
// instance's labels: __meta_muster_service, __meta_muster_id,
// __meta_muster_addr, __meta_muster_zone, __meta_muster_region,
// __meta_muster_version, __meta_muster_color, __meta_muster_weight,
// __meta_muster_draining ("true" or "false") and
// __meta_muster_metadata_<key> for each metadata key, with every character
// outside [a-zA-Z0-9_] replaced by '_' (docs/PROMETHEUS.md). A key that
// does not start with a letter, or is "job" or "instance", is left out and
// counted (Stats.SkippedLabels; SafeKey says why).
//
// The query parameter service filters the answer by service name; it may be
// repeated or hold a comma-separated list. An invalid name is answered with
// 400 Bad Request naming it. A service not followed yet (new in the
// registry since the last listing) has no targets until the next listing.
//
// A Handler is safe for concurrent use; Close stops its goroutines and
// watchers. It is mounted like any handler:
//
//	h, err := promsd.NewHandler(discovery)
//	if err != nil {
//		return err
//	}
//	defer h.Close()
//	mux.Handle("GET /prometheus/sd", h)
package promsd
