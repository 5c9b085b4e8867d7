package xds

import (
	"errors"
	"fmt"
	"time"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// forgetGone stops following, and unpublishes, every service that has had
// no instance for forgetAfter and that listed, the names of a successful
// listing of the Discovery, does not name (WithForgetAfter). It is called
// by the list loop only, which also makes every call of follow after New:
// a service is never followed again while it is being forgotten.
func (s *Server) forgetGone(listed []string, now time.Time) {
	names := make(map[string]bool, len(listed))
	for _, n := range listed {
		names[n] = true
	}
	var gone []*feed
	s.mu.Lock()
	for svc, f := range s.feeds {
		if !names[svc] && f.forget(now, s.opts.forgetAfter) {
			delete(s.feeds, svc)
			gone = append(gone, f)
		}
	}
	s.mu.Unlock()
	for _, f := range gone {
		f.f.Close()
		if err := s.c.removeService(f.service); err != nil {
			s.log.Error("xds: cannot unpublish a service gone from the registry", "service", f.service, "error", err)
			continue
		}
		s.stats.forgotten.Add(1)
		s.log.Info("xds: service gone from the registry; its resources are removed until it comes back",
			"service", f.service, "empty_for", now.Sub(f.emptySince).Round(time.Second))
	}
}

// forget marks the feed as forgotten, so that it publishes nothing more,
// if its published list has been empty for at least d, and reports whether
// it did.
func (f *feed) forget(now time.Time, d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.emptySince.IsZero() || now.Sub(f.emptySince) < d {
		return false
	}
	f.gone = true
	return true
}

// removeService removes a service's resources, of every type and from every
// zone's endpoints. Clients watching it get what go-control-plane sends for
// a removed resource: a Listener or Cluster response without it (Listeners
// and Clusters are sent in full), nothing for its route and endpoints.
func (c *caches) removeService(service string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	clusters := clusterNames(service, c.coloring[service].colors)
	delete(c.services, service)
	delete(c.bytes, service)
	delete(c.ringHash, service)
	delete(c.coloring, service)
	var errs []error
	for _, lc := range append([]*cachev3.LinearCache{c.lds}, c.rds[:]...) {
		if err := lc.DeleteResource(service); err != nil {
			errs = append(errs, fmt.Errorf("xds: unpublish %s: %w", service, err))
		}
	}
	for _, name := range clusters {
		if err := c.cds.DeleteResource(name); err != nil {
			errs = append(errs, fmt.Errorf("xds: unpublish %s: %w", name, err))
		}
	}
	for _, zc := range c.eds {
		if err := zc.remove(clusters); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
