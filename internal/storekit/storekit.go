// Package storekit is what every backend's registry.Store shares: the
// Discovery it opened, the Registrar made when first asked for and closed
// with the store, and the followers of the services' canaries and
// policies, one per service however many read it. A backend's Store
// embeds a Base and adds its Admin.
package storekit

import (
	"context"
	"errors"
	"sync"

	"github.com/musterhq/muster/internal/settingfeed"
	"github.com/musterhq/muster/registry"
)

// Base is the part of a registry.Store every backend shares. Set its
// exported fields before first use; it is safe for concurrent use after.
type Base struct {
	// D is the store's Discovery; Close closes it.
	D registry.Discovery
	// NewRegistrar makes the store's Registrar, at the first call of
	// Registrar. The backend checked its options when the store was
	// opened, so it cannot fail.
	NewRegistrar func() registry.Registrar
	// Canaries and Policies follow the services' settings: set their
	// Follow to the backend's followers.
	Canaries settingfeed.Shared[registry.Canary]
	Policies settingfeed.Shared[registry.Policy]

	mu     sync.Mutex
	reg    registry.Registrar // nil until Registrar is called
	closed bool
}

// Discovery returns the store's Discovery.
func (b *Base) Discovery() registry.Discovery { return b.D }

// WatchCanary follows service's canary (registry.CanarySource), over one
// follower per service for every reader of the store.
func (b *Base) WatchCanary(ctx context.Context, service string) <-chan registry.Canary {
	return b.Canaries.Watch(ctx, service)
}

// WatchPolicy follows service's policy (registry.PolicySource), over one
// follower per service for every reader of the store.
func (b *Base) WatchPolicy(ctx context.Context, service string) <-chan registry.Policy {
	return b.Policies.Watch(ctx, service)
}

// Registrar returns the store's Registrar, made at the first call. A
// Registrar asked for after Close is closed: its Register returns
// registry.ErrClosed.
func (b *Base) Registrar() registry.Registrar {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reg == nil {
		b.reg = b.NewRegistrar()
		if b.closed {
			_ = b.reg.Close()
		}
	}
	return b.reg
}

// Close closes the Registrar, if one was made (its instances leave the
// registry at once), then the Discovery, then each of more in order. It
// is idempotent: later calls return nil. It returns every error joined.
func (b *Base) Close(more ...func() error) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	reg := b.reg
	b.mu.Unlock()
	var errs []error
	if reg != nil {
		errs = append(errs, reg.Close())
	}
	errs = append(errs, b.D.Close())
	for _, f := range more {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}
