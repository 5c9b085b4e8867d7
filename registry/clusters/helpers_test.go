package clusters_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/clusters"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// region is one independent etcd cluster with its own registrar and
// discovery clients.
type region struct {
	name string
	c    *etcdtest.Cluster
	reg  *etcd.Registrar
	disc *etcd.Discovery
}

// regionSetup says how a region's clients reach its cluster.
type regionSetup struct {
	etcd []etcdtest.Option
	// discoveryDirect: the Discovery bypasses the member's proxy, so that
	// stalling the proxy cuts only the Registrar (its leases expire).
	discoveryDirect bool
}

func startRegion(t *testing.T, name string, s regionSetup) *region {
	t.Helper()
	c := etcdtest.Start(t, s.etcd...)
	r := &region{name: name, c: c}
	var err error
	if r.reg, err = etcd.NewRegistrar(c.Client(t), etcdopts.Registrar()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.reg.Close() })
	dcli := c.Client(t)
	if s.discoveryDirect {
		dcli = c.Client(t, c.DirectEndpoints()...)
	}
	if r.disc, err = etcd.NewDiscovery(dcli, etcdopts.Discovery()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.disc.Close() })
	return r
}

// register registers id of user at addr in r's cluster, waiting for it
// to be written.
func (r *region) register(t *testing.T, id, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.reg.Register(ctx, registry.Instance{Name: "user", ID: id, Addr: addr}); err != nil {
		t.Fatalf("register %s in %s: %v", id, r.name, err)
	}
}

// registerMany registers n instances id-0.. of user at made-up addresses.
func (r *region) registerMany(t *testing.T, prefix string, n int) {
	t.Helper()
	for i := range n {
		r.register(t, fmt.Sprintf("%s-%02d", prefix, i), fmt.Sprintf("127.0.0.%d:%d", 1+len(r.name), 1000+i))
	}
}

func newUnion(t *testing.T, rs ...*region) *clusters.Discovery {
	t.Helper()
	cs := make([]clusters.Cluster, len(rs))
	for i, r := range rs {
		cs[i] = clusters.Cluster{Name: r.name, Region: r.name, Discovery: r.disc}
	}
	d, err := clusters.New(cs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func watch(t *testing.T, d registry.Discovery) registry.Watcher {
	t.Helper()
	w, err := d.Watch(context.Background(), "user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// part returns cluster's part of s.
func part(s registry.Snapshot, cluster string) registry.ClusterSnapshot {
	for _, c := range s.Clusters {
		if c.Cluster == cluster {
			return c
		}
	}
	return registry.ClusterSnapshot{}
}

// channel is what a gRPC channel would be given by the resolver: a
// ClientConn of the test's own, recording the instances of each state.
type channel struct {
	mu      sync.Mutex
	states  int
	last    []registry.Instance
	changed chan struct{}
}

func (c *channel) UpdateState(s grpcresolver.State) error {
	list := make([]registry.Instance, 0, len(s.Endpoints))
	for _, ep := range s.Endpoints {
		if in, ok := resolver.InstanceOf(ep); ok {
			list = append(list, in)
		}
	}
	c.mu.Lock()
	c.states++
	c.last = list
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return nil
}
func (c *channel) ReportError(error)                                    {}
func (c *channel) NewAddress([]grpcresolver.Address)                    {}
func (c *channel) ParseServiceConfig(string) *serviceconfig.ParseResult { return nil }

// openChannel builds a resolver of muster:///user on b for a recording
// channel.
func openChannel(t *testing.T, b *resolver.Builder) *channel {
	t.Helper()
	c := &channel{changed: make(chan struct{}, 1)}
	r, err := b.Build(grpcresolver.Target{URL: url.URL{Scheme: "muster", Path: "/user"}}, c, grpcresolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return c
}

// served returns the last state's instance count by cluster.
func (c *channel) served() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := map[string]int{}
	for _, in := range c.last {
		n[registry.ClusterOf(&in)]++
	}
	return n
}

func (c *channel) has(id, cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, in := range c.last {
		if in.ID == id && registry.ClusterOf(&in) == cluster {
			return true
		}
	}
	return false
}

// waitFor waits up to d for cond on the channel's states.
func (c *channel) waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := c.await(d, cond); err != nil {
		t.Fatalf("%s: %v; served %v", what, err, c.served())
	}
}

func (c *channel) await(d time.Duration, cond func() bool) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for !cond() {
		select {
		case <-c.changed:
		case <-timer.C:
			return errors.New("not within " + d.String())
		}
	}
	return nil
}

// newBuilder returns a Builder over d with the default protection.
func newBuilder(d registry.Discovery, opts ...resolver.Option) *resolver.Builder {
	return resolver.NewBuilder(d, append([]resolver.Option{resolver.WithLogger(quiet)}, opts...)...)
}
