package reliability_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/resolvertest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

var soak = flag.Duration("soak", 60*time.Second, "how long the chaos soak injects faults")

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfChild()
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const ttl = 2 * time.Second

// regOpts are the Registrar options of the suite: short timers so that
// faults play out in seconds.
func regOpts(extra ...etcd.RegistrarOption) []etcd.RegistrarOption {
	return etcdopts.Registrar(append([]etcd.RegistrarOption{etcd.WithTTL(ttl), etcd.WithRequestTimeout(time.Second)}, extra...)...)
}

// discOpts are the Discovery options of the suite, with regOpts' timers.
func discOpts() []etcd.DiscoveryOption {
	return etcdopts.Discovery(etcd.WithRequestTimeout(time.Second))
}

// world is a 3-member cluster, a client side (discovery, resolver,
// channel) and backends, each with its own registrar as its own process
// would have.
type world struct {
	c    *etcdtest.Cluster
	cli  *clientv3.Client // through every member's proxy
	disc *etcd.Discovery
	b    *resolver.Builder
}

func newWorld(t *testing.T, extra ...etcdtest.Option) *world {
	t.Helper()
	c := etcdtest.Start(t, append([]etcdtest.Option{etcdtest.WithSize(3)}, extra...)...)
	w := &world{c: c, cli: c.Client(t)}
	var err error
	if w.disc, err = etcd.NewDiscovery(c.Client(t), discOpts()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.disc.Close() })
	w.b = resolver.NewBuilder(w.disc, resolver.WithLogger(quiet))
	return w
}

type backend struct {
	id  string
	be  *testbackend.Backend
	reg *etcd.Registrar
}

// startBackend runs a gRPC backend registered as id of greeter by its own
// registrar on its own client.
func (w *world) startBackend(t *testing.T, id string) *backend {
	t.Helper()
	return w.startBackendWith(t, w.c.Client(t), id)
}

// startBackendWith is startBackend with the registrar on cli.
func (w *world) startBackendWith(t *testing.T, cli *clientv3.Client, id string) *backend {
	t.Helper()
	reg, err := etcd.NewRegistrar(cli, regOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	be := testbackend.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := reg.Register(ctx, registry.Instance{Name: "greeter", ID: id, Addr: be.Addr}); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	return &backend{id: id, be: be, reg: reg}
}

func (w *world) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("muster:///greeter", grpc.WithResolvers(w.b),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`), grpc.WithDisableServiceConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// dialRecording opens a channel on greeter through b, with the balancer
// lb (a policy name), closed with the test; onUpdate is given the number
// of endpoints of each state the resolver hands it.
func dialRecording(t *testing.T, b grpcresolver.Builder, lb string, onUpdate func(n int)) *grpc.ClientConn {
	t.Helper()
	rb := resolvertest.RecordingBuilder{Builder: b, OnUpdate: func(n int, _ time.Time) { onUpdate(n) }}
	conn, err := grpc.NewClient("muster:///greeter", grpc.WithResolvers(rb),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}]}`, lb)), grpc.WithDisableServiceConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// watch opens a watcher on greeter.
func (w *world) watch(t *testing.T) registry.Watcher {
	t.Helper()
	wt, err := w.disc.Watch(context.Background(), "greeter")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wt.Close() })
	return wt
}

// keys returns the greeter keys in etcd and the lease of each.
func (w *world) keys(t *testing.T) map[string]int64 {
	t.Helper()
	return keysOf(t, w.cli)
}

// keysOf returns the greeter keys in etcd, read through cli, and the lease
// of each.
func keysOf(t *testing.T, cli *clientv3.Client) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for k, e := range entriesOf(t, cli) {
		out[k] = e.lease
	}
	return out
}

// keyEntry is a key's lease and the revision that created it: a key put
// again over itself (bound to a new lease) keeps its creation revision; a
// key deleted and put again gets a new one.
type keyEntry struct{ lease, created int64 }

// entriesOf returns the greeter keys in etcd, read through cli.
func entriesOf(t *testing.T, cli *clientv3.Client) map[string]keyEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, registry.ServicePrefix(registry.DefaultPrefix, "greeter"), clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read keys: %v", err)
	}
	out := map[string]keyEntry{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = keyEntry{lease: kv.Lease, created: kv.CreateRevision}
	}
	return out
}

func key(id string) string { return registry.Key(registry.DefaultPrefix, "greeter", id) }

// within polls cond until it holds, failing after bound; it returns how
// long it took.
func within(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("not %s within %v", what, bound)
		}
		time.Sleep(20 * time.Millisecond) // polling state that has no event to await
	}
	return time.Since(start)
}

func fmtDur(d time.Duration) string { return fmt.Sprint(d.Round(time.Millisecond)) }

func errorsIsPending(err error) bool { return errors.Is(err, registry.ErrPending) }
