package health

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/musterhq/muster/registry"
)

// ListingDiscovery is a Discovery that lists its services.
type ListingDiscovery interface {
	registry.Discovery
	registry.ServiceLister
}

// Listing is a Discovery that keeps the outcome of its listings of
// services, for a process that serves every service of the registry (the
// xDS control plane, Prometheus's service discovery): such a process has
// loaded what it serves once a listing answered and each service it
// listed was read. It passes everything else on to the Discovery it
// wraps, its Locate and DiscoveryStats included. It is safe for
// concurrent use.
type Listing struct {
	ListingDiscovery

	mu           sync.Mutex
	first        []string  // the first listing's answer
	listed       bool      // a listing answered
	failingSince time.Time // since when listings fail; zero after one answered
	err          error     // the last listing's error; nil if it answered
}

var (
	_ ListingDiscovery       = (*Listing)(nil)
	_ registry.StatsReporter = (*Listing)(nil)
)

// NewListing wraps d.
func NewListing(d ListingDiscovery) *Listing { return &Listing{ListingDiscovery: d} }

// Services lists d's services and keeps the outcome.
func (l *Listing) Services(ctx context.Context) ([]string, error) {
	names, err := l.ListingDiscovery.Services(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.failingSince.IsZero() {
			l.failingSince = time.Now()
		}
		l.err = err
		return names, err
	}
	if !l.listed {
		l.listed, l.first = true, names
	}
	l.failingSince, l.err = time.Time{}, nil
	return names, nil
}

// Locate is the wrapped Discovery's Locate, "" if it has none.
func (l *Listing) Locate(service string) string {
	if lo, ok := l.ListingDiscovery.(interface{ Locate(string) string }); ok {
		return lo.Locate(service)
	}
	return ""
}

// DiscoveryStats is the wrapped Discovery's, zero if it reports none.
func (l *Listing) DiscoveryStats() registry.DiscoveryStats {
	if r, ok := l.ListingDiscovery.(registry.StatsReporter); ok {
		return r.DiscoveryStats()
	}
	return registry.DiscoveryStats{}
}

// State is the state of a process serving every service l lists: it waits
// for a listing to answer, then for each service of the first answer to
// be read; a listing that fails makes the process stale.
func (l *Listing) State() State {
	l.mu.Lock()
	listed, first, since, err := l.listed, l.first, l.failingSince, l.err
	l.mu.Unlock()
	st := Following(l.DiscoveryStats(), first)
	st.StaleSince, st.Err = since, err
	if !listed {
		st.Waiting = "the registry's services, not listed yet"
	}
	return st
}

// Following is the state of a process serving the services a Discovery
// with stats st follows: it waits for each service of want to be read
// once. Each service's stale time and error are its snapshot's.
func Following(st registry.DiscoveryStats, want []string) State {
	var s State
	loaded := make(map[string]bool, len(st.PerService))
	for _, p := range st.PerService {
		loaded[p.Name] = p.Loaded
		svc := Service{Name: p.Name, Instances: p.Instances, Loaded: p.Loaded, StaleSince: p.StaleSince}
		if p.Err != nil {
			svc.Error, svc.Cause = p.Err.Error(), Cause(p.Err)
		}
		s.Services = append(s.Services, svc)
	}
	var missing []string
	for _, name := range want {
		if !loaded[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		s.Waiting = "the first read of " + strings.Join(missing, ", ")
	}
	return s
}
