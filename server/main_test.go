package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "github.com/musterhq/muster/balancer/p2c"
	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
	"github.com/musterhq/muster/server"
)

// childEnv, when set, makes the test binary run one registered server and
// wait to be killed (see TestCrashedServerLeavesWithinTTL).
const childEnv = "MUSTER_SERVER_TEST_CHILD_ENDPOINT"

// serveChildEnv, when set, makes the test binary run one server with the
// function Serve until it gets SIGTERM (see TestServeLeavesOnSIGTERM).
const serveChildEnv = "MUSTER_SERVER_TEST_SERVE_CHILD_ENDPOINT"

func TestMain(m *testing.M) {
	if ep := os.Getenv(childEnv); ep != "" {
		os.Exit(runChild(ep))
	}
	if ep := os.Getenv(serveChildEnv); ep != "" {
		os.Exit(runServeChild(ep))
	}
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

func runChild(endpoint string) int {
	cli, err := clientv3.New(etcd.ClientConfig(endpoint))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	reg, err := etcd.NewRegistrar(cli, etcd.WithTTL(2*time.Second), etcd.WithLogger(quiet))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := server.New(reg, registry.Instance{Name: "greeter", ID: "child"}, server.WithLogger(quiet))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = s.Serve(lis) }()
	<-s.Ready()
	fmt.Println(s.Instance().Addr)
	select {} // until killed
}

// startChild runs the test binary as a child server (env set to the etcd
// endpoint) and returns it with the address it serves on, the first line
// it prints. The child is killed at the end of the test if still running.
func startChild(t *testing.T, env, endpoint string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+endpoint)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case addr := <-lines:
		if addr == "" {
			t.Fatalf("child server exited before it served")
		}
		return cmd, addr
	case <-time.After(20 * time.Second):
		t.Fatalf("child server did not start within 20s")
		return nil, ""
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	c    *etcdtest.Cluster
	cli  *clientv3.Client
	disc *etcd.Discovery
	b    *resolver.Builder
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := etcdtest.Start(t)
	e := &env{c: c, cli: c.Client(t)}
	var err error
	if e.disc, err = etcd.NewDiscovery(e.cli, etcdopts.Discovery()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.disc.Close() })
	e.b = resolver.NewBuilder(e.disc, resolver.WithLogger(quiet))
	return e
}

// backend is one server process: its own registrar (lease) and server.
type backend struct {
	s   *server.Server
	reg *etcd.Registrar
	err chan error
}

// start runs a greeter server on a new loopback port, registered as id.
func (e *env) start(t *testing.T, id string, opts ...server.Option) *backend {
	t.Helper()
	return e.startInstance(t, registry.Instance{Name: "greeter", ID: id}, nil, opts...)
}

// startInstance runs a server for in on a new loopback port, with the
// services setup registers (nil for none beyond health).
func (e *env) startInstance(t *testing.T, in registry.Instance, setup func(*grpc.Server), opts ...server.Option) *backend {
	t.Helper()
	b := e.launch(t, in, setup, nil, opts...)
	select {
	case <-b.s.Ready():
	case err := <-b.err:
		t.Fatalf("Serve: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("server %s not ready within 10s", in.ID)
	}
	return b
}

// launch starts Serve for in on lis (a new loopback port if nil) and
// returns at once, without waiting for Ready.
func (e *env) launch(t *testing.T, in registry.Instance, setup func(*grpc.Server), lis net.Listener, opts ...server.Option) *backend {
	t.Helper()
	reg, err := etcd.NewRegistrar(e.cli, etcdopts.Registrar()...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(reg, in,
		append([]server.Option{server.WithLogger(quiet), server.WithDrainDelay(300 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(s.GRPC())
	}
	if lis == nil {
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	b := &backend{s: s, reg: reg, err: make(chan error, 1)}
	go func() { b.err <- s.Serve(lis) }()
	t.Cleanup(func() { b.stop(t) })
	return b
}

// launchOn starts Serve for greeter instance id on lis (a new loopback
// port if nil) and returns at once, without waiting for Ready.
func (e *env) launchOn(t *testing.T, id string, lis net.Listener, opts ...server.Option) *backend {
	t.Helper()
	return e.launch(t, registry.Instance{Name: "greeter", ID: id}, nil, lis, opts...)
}

// stop shuts the backend down (if not already) and closes its registrar.
func (b *backend) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.s.Shutdown(ctx); err == nil {
		if serr := <-b.err; serr != server.ErrServerClosed {
			t.Errorf("Serve returned %v after Shutdown, want ErrServerClosed", serr)
		}
	}
	_ = b.reg.Close()
}

func dial(t *testing.T, e *env, target string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithResolvers(e.b),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_p2c":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
