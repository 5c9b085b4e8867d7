package balancersuite

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// Registry is a real embedded etcd with a Registrar and the Muster
// resolver over a Discovery.
type Registry struct {
	// Builder resolves "muster:///<service>" targets.
	Builder *resolver.Builder
	// Client is the etcd client, for operators' changes (SetCanary).
	Client *clientv3.Client

	reg  *etcd.Registrar
	disc *etcd.Discovery
}

// BuilderWith returns another resolver Builder over the registry, with
// opts (WithZone, WithRegion, ...). Close nothing: it holds nothing of its
// own.
func (r *Registry) BuilderWith(opts ...resolver.Option) *resolver.Builder {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	return resolver.NewBuilder(r.disc, append([]resolver.Option{resolver.WithLogger(quiet)}, opts...)...)
}

// StartRegistry starts an embedded etcd and the Registrar, Discovery and
// resolver Builder on it, all closed at cleanup.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	c := etcdtest.Start(t)
	cli := c.Client(t)
	reg, err := etcd.NewRegistrar(cli, etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	disc, err := etcd.NewDiscovery(cli, etcdopts.Discovery()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disc.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	canaries, err := etcd.NewCanaries(cli, etcdopts.Watch()...)
	if err != nil {
		t.Fatal(err)
	}
	b := resolver.NewBuilder(disc, resolver.WithLogger(quiet), resolver.WithCanaries(canaries))
	return &Registry{Builder: b, Client: cli, reg: reg, disc: disc}
}

// Register registers in, failing the test on error.
func (r *Registry) Register(t testing.TB, in registry.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.reg.Register(ctx, in); err != nil {
		t.Fatalf("register %+v: %v", in, err)
	}
}
