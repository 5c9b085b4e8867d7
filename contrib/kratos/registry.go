package kratos

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	kratosregistry "github.com/go-kratos/kratos/v2/registry"

	"github.com/musterhq/muster/registry"
)

var (
	_ kratosregistry.Registrar = (*Registry)(nil)
	_ kratosregistry.Discovery = (*Registry)(nil)
)

// Registry is a Kratos registry backed by a Muster Registrar and Discovery.
type Registry struct {
	r registry.Registrar
	d registry.Discovery
}

// New returns a Kratos registry registering with r and discovering with d;
// either may be nil for an app that only serves or only calls (its methods
// then return an error). Registry does not own r and d: close them after
// the app stops.
func New(r registry.Registrar, d registry.Discovery) *Registry {
	return &Registry{r: r, d: d}
}

// Register registers the Kratos instance si with Muster: its name, ID,
// version, metadata and the address of its first grpc:// endpoint. An
// instance without one, or whose name or ID Muster does not accept, is an
// error. It returns once written (see registry.Registrar.Register).
func (k *Registry) Register(ctx context.Context, si *kratosregistry.ServiceInstance) error {
	if k.r == nil {
		return errors.New("kratos: Register: no Muster Registrar")
	}
	in, err := instanceOf(si)
	if err != nil {
		return err
	}
	return k.r.Register(ctx, in)
}

// Deregister removes the instance registered for si.
func (k *Registry) Deregister(ctx context.Context, si *kratosregistry.ServiceInstance) error {
	if k.r == nil {
		return errors.New("kratos: Deregister: no Muster Registrar")
	}
	return k.r.Deregister(ctx, si.Name, si.ID)
}

// GetService returns the instances of service once Muster's Discovery has
// loaded it, or ctx's error.
func (k *Registry) GetService(ctx context.Context, service string) ([]*kratosregistry.ServiceInstance, error) {
	w, err := k.Watch(ctx, service)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	return w.Next()
}

// Watch follows service: the watcher's first Next returns the list once
// loaded, each later Next the list after a change.
func (k *Registry) Watch(ctx context.Context, service string) (kratosregistry.Watcher, error) {
	if k.d == nil {
		return nil, errors.New("kratos: Watch: no Muster Discovery")
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := k.d.Watch(ctx, service)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kratos: watch %s: %w", service, err)
	}
	return &watcher{ctx: ctx, cancel: cancel, w: w, first: true}, nil
}

// instanceOf converts a Kratos instance to a Muster one.
func instanceOf(si *kratosregistry.ServiceInstance) (registry.Instance, error) {
	for _, e := range si.Endpoints {
		u, err := url.Parse(e)
		if err != nil {
			return registry.Instance{}, fmt.Errorf("kratos: endpoint %q: %w", e, err)
		}
		if u.Scheme == "grpc" {
			return registry.Instance{
				Name: si.Name, ID: si.ID, Version: si.Version, Metadata: si.Metadata, Addr: u.Host,
			}, nil
		}
	}
	return registry.Instance{}, fmt.Errorf("kratos: instance %s has no grpc:// endpoint in %v", si, si.Endpoints)
}

// kratosInstance converts a Muster instance to a Kratos one.
func kratosInstance(in *registry.Instance) *kratosregistry.ServiceInstance {
	return &kratosregistry.ServiceInstance{
		ID: in.ID, Name: in.Name, Version: in.Version, Metadata: in.Metadata,
		Endpoints: []string{"grpc://" + in.Addr + "?isSecure=false"},
	}
}
