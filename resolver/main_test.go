package resolver_test

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

func TestMain(m *testing.M) {
	// MUSTER_TEST_RUN, when set, is the -run pattern: the mutation tool runs
	// the package's tests for every mutant and cannot pass -run itself, so
	// the mutation run of the pure code names its tests this way
	// (docs/MUTATION.md).
	if run := os.Getenv("MUSTER_TEST_RUN"); run != "" {
		flag.Parse()
		if err := flag.Set("test.run", run); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is one embedded etcd with a registrar, a discovery and a builder.
type env struct {
	c    *etcdtest.Cluster
	cli  *clientv3.Client
	reg  *etcd.Registrar
	disc *etcd.Discovery
	b    *resolver.Builder
}

func newEnv(t *testing.T, ropts ...resolver.Option) *env {
	t.Helper()
	c := etcdtest.Start(t)
	e := &env{c: c, cli: c.Client(t)}
	var err error
	if e.reg, err = etcd.NewRegistrar(e.cli, etcdopts.Registrar()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.reg.Close() })
	if e.disc, err = etcd.NewDiscovery(e.cli, etcdopts.Discovery()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.disc.Close() })
	e.b = resolver.NewBuilder(e.disc, append([]resolver.Option{resolver.WithLogger(quiet)}, ropts...)...)
	return e
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// serve starts a backend and registers it as id of greeter.
func (e *env) serve(t *testing.T, id, version, zone string) *testbackend.Backend {
	t.Helper()
	be := testbackend.Start(t)
	registrytest.RegisterEventually(t, e.reg, registry.Instance{Name: "greeter", ID: id, Addr: be.Addr, Version: version, Zone: zone})
	return be
}

const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// dial opens a channel to target that balances with round_robin: its own
// default service config, kept by disabling the resolver's (which would
// replace it).
func dial(t *testing.T, b grpc.DialOption, target string, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	return dialWith(t, target, append([]grpc.DialOption{b, grpc.WithDefaultServiceConfig(roundRobin), grpc.WithDisableServiceConfig()}, extra...)...)
}

// dialWith opens a channel to target with opts and plain-text
// credentials, closed at cleanup.
func dialWith(t *testing.T, target string, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, extra...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatalf("NewClient(%s): %v", target, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// callUntil makes calls until cond holds on the per-address counts of
// successful calls, failing after 10s.
func callUntil(t *testing.T, conn *grpc.ClientConn, what string, cond func(map[string]int) bool) map[string]int {
	t.Helper()
	return testbackend.CallUntil(t, conn, 10*time.Second, what, cond)
}

// calls makes n calls and fails the test on the first error.
func calls(t *testing.T, conn *grpc.ClientConn, n int) map[string]int {
	t.Helper()
	return testbackend.Calls(t, conn, n)
}

func hasAll(addrs ...string) func(map[string]int) bool { return testbackend.HasAll(addrs...) }

func writeFile(dir, name, content string) error {
	return os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
}
