package legacy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/musterhq/muster/registry"
)

var (
	_ registry.Discovery     = (*Merged)(nil)
	_ registry.ServiceLister = (*Merged)(nil)
	_ registry.Watcher       = (*mergedWatcher)(nil)
)

// Source is a legacy registry merged into Muster's (NewMerged).
type Source struct {
	// Name names the source in errors and logs, such as "go-zero", and
	// is the SourceKey metadata of the instances found in it. It must
	// not be empty nor PrimarySource.
	Name string
	// Discovery follows the source: normally an etcd.Discovery with
	// etcd.WithLayout(a GoZero, Kratos or Naming layout).
	Discovery registry.Discovery
	// Services are the Muster service names looked up in this source;
	// empty means every service.
	Services []string
}

// Merged is a Discovery that serves, for each service, the instances of
// Muster's own registry and of the legacy sources that list the service:
// the union by address, Muster's instance winning when an address is in
// both (see the package documentation for staleness and loading). Every
// instance it serves carries where it was found in its SourceKey metadata
// (SourceOf): a copy of the part's instance, made once per change of it.
//
// Each part keeps its own shared watch; a Merged watcher follows its parts
// with one goroutine. Merged does not own its parts: Close closes the
// watchers opened through it, not the parts' Discoveries. It is safe for
// concurrent use.
type Merged struct {
	primary registry.Discovery
	sources []Source

	mu       sync.Mutex
	watchers map[*mergedWatcher]struct{}
	closed   bool
}

// NewMerged returns a Discovery merging primary (Muster's registry) with
// sources, in order of preference. A nil Discovery, a source without a
// name or named PrimarySource, or an invalid service name in a source is
// an error.
func NewMerged(primary registry.Discovery, sources ...Source) (*Merged, error) {
	if primary == nil {
		return nil, errors.New("legacy: NewMerged: nil primary Discovery")
	}
	for i, s := range sources {
		if s.Discovery == nil || s.Name == "" {
			return nil, fmt.Errorf("legacy: NewMerged: source %d needs a Name and a Discovery", i)
		}
		if s.Name == PrimarySource {
			return nil, fmt.Errorf("legacy: NewMerged: source %d: the name %q is Muster's own registry's", i, PrimarySource)
		}
		for _, name := range s.Services {
			if err := registry.ValidateName(name); err != nil {
				return nil, fmt.Errorf("legacy: NewMerged: source %s: %w", s.Name, err)
			}
		}
	}
	return &Merged{primary: primary, sources: slices.Clone(sources), watchers: map[*mergedWatcher]struct{}{}}, nil
}

// Watch follows service in Muster's registry and in every source that
// lists it, and returns at once; see registry.Discovery.
func (m *Merged) Watch(ctx context.Context, service string) (registry.Watcher, error) {
	if err := registry.ValidateName(service); err != nil {
		return nil, err
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, registry.ErrClosed
	}
	parts := make([]registry.Watcher, 0, 1+len(m.sources))
	names := make([]string, 0, 1+len(m.sources))
	closeAll := func() {
		for _, p := range parts {
			_ = p.Close()
		}
	}
	w, err := m.primary.Watch(ctx, service)
	if err != nil {
		return nil, err
	}
	parts, names = append(parts, w), append(names, PrimarySource)
	for _, s := range m.sources {
		if len(s.Services) > 0 && !slices.Contains(s.Services, service) {
			continue
		}
		w, err := s.Discovery.Watch(ctx, service)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("legacy: watch %s in %s: %w", service, s.Name, err)
		}
		parts, names = append(parts, w), append(names, s.Name)
	}
	mw := newMergedWatcher(m, service, parts, names)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		_ = mw.Close()
		return nil, registry.ErrClosed
	}
	m.watchers[mw] = struct{}{}
	m.mu.Unlock()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _ = mw.Close() })
		go func() { <-mw.done; stop() }()
	}
	return mw, nil
}

// Services returns the services of Muster's registry (if the primary
// Discovery is a registry.ServiceLister) and those the sources list in
// their Services, sorted and without duplicates: the services m merges. A
// service only in a source that names no services is not listed, since a
// legacy layout cannot list its services.
func (m *Merged) Services(ctx context.Context) ([]string, error) {
	var names []string
	if l, ok := m.primary.(registry.ServiceLister); ok {
		var err error
		if names, err = l.Services(ctx); err != nil {
			return nil, err
		}
	}
	for _, s := range m.sources {
		names = append(names, s.Services...)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Locate says where service is looked up: in each part that follows it,
// as the part's own Locate says (its type when it has none).
func (m *Merged) Locate(service string) string {
	parts := []string{PrimarySource + ": " + locate(m.primary, service)}
	for _, src := range m.sources {
		if len(src.Services) == 0 || slices.Contains(src.Services, service) {
			parts = append(parts, src.Name+": "+locate(src.Discovery, service))
		}
	}
	return strings.Join(parts, "; ")
}

// locate is d's Locate of service, or d's type.
func locate(d registry.Discovery, service string) string {
	if l, ok := d.(interface{ Locate(string) string }); ok {
		return l.Locate(service)
	}
	return fmt.Sprintf("%T", d)
}

// Close closes every watcher opened through m. It is idempotent; the
// parts' Discoveries stay open.
func (m *Merged) Close() error {
	m.mu.Lock()
	m.closed = true
	ws := m.watchers
	m.watchers = map[*mergedWatcher]struct{}{}
	m.mu.Unlock()
	for w := range ws {
		_ = w.Close()
	}
	return nil
}

func (m *Merged) forget(w *mergedWatcher) {
	m.mu.Lock()
	delete(m.watchers, w)
	m.mu.Unlock()
}
