package console

import (
	"fmt"

	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/registry/legacy"
)

// legacySource is one WithLegacy option.
type legacySource struct {
	name     string
	layout   etcd.Layout
	services []string
}

// WithLegacy merges a legacy registry with Muster's in the console's views,
// as clients' legacy.Merged Discovery does: each instance is shown once per
// address (Muster's winning) with where it was found, name for this
// source (such as "go-zero"; "muster" for Muster's registry). The layout
// (legacy.GoZero, legacy.Kratos, legacy.Naming) is read on the client of
// the console's store, which must be an *etcd.Store (New fails
// otherwise); services limit it to those services, which the services page
// then lists even before they are in Muster's registry (none: every
// service, by its Muster name). It may be given more than once. The
// default is none: Muster's registry alone. An empty name or
// legacy.PrimarySource, a nil layout or an invalid service name is an
// error. Actions apply to Muster's instances only.
func WithLegacy(name string, layout etcd.Layout, services ...string) Option {
	return func(o *options) {
		switch {
		case name == "" || name == legacy.PrimarySource:
			o.fail(fmt.Errorf("console: WithLegacy(%q): want a source name other than \"\" and %q", name, legacy.PrimarySource))
			return
		case layout == nil:
			o.fail(fmt.Errorf("console: WithLegacy(%q): nil layout", name))
			return
		}
		for _, s := range services {
			if err := registry.ValidateName(s); err != nil {
				o.fail(fmt.Errorf("console: WithLegacy(%q): %w", name, err))
				return
			}
		}
		o.legacy = append(o.legacy, legacySource{name: name, layout: layout, services: services})
	}
}

// lister is a Discovery that lists its services.
type lister interface {
	registry.Discovery
	registry.ServiceLister
}

// newView returns the Discovery the console reads services through: d
// (store's), or d merged with the legacy sources of o, each read by a
// Discovery of its own on the client of store, which must then be an
// *etcd.Store; closers close what it opened, in order.
func newView(store registry.Store, d lister, o options) (view lister, closers []func() error, err error) {
	if len(o.legacy) == 0 {
		return d, nil, nil
	}
	es, ok := store.(*etcd.Store)
	if !ok {
		return nil, nil, fmt.Errorf("console: WithLegacy reads etcd layouts: the store must be an *etcd.Store, not %T", store)
	}
	closeAll := func() {
		for _, c := range closers {
			_ = c()
		}
	}
	parts := make([]legacy.Source, 0, len(o.legacy))
	for _, l := range o.legacy {
		ld, err := etcd.NewDiscovery(es.Client(), etcd.WithLayout(l.layout), etcd.WithRequestTimeout(o.requestTimeout), etcd.WithLogger(o.log))
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("console: %w", err)
		}
		closers = append(closers, ld.Close)
		parts = append(parts, legacy.Source{Name: l.name, Discovery: ld, Services: l.services})
	}
	m, err := legacy.NewMerged(d, parts...)
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("console: %w", err)
	}
	// The merged watchers go before their parts.
	return m, append([]func() error{m.Close}, closers...), nil
}

// fromMuster reports whether in is an instance of Muster's registry, which
// actions, overrides and leases apply to: not one a legacy source listed.
func fromMuster(in *registry.Instance) bool {
	src := legacy.SourceOf(in)
	return src == "" || src == legacy.PrimarySource
}
