package gozero_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zeromicro/go-zero/core/conf"
	"github.com/zeromicro/go-zero/core/service"
	"github.com/zeromicro/go-zero/zrpc"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/contrib/gozero"
	"github.com/musterhq/muster/internal/greeterpb"
	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// zrpcChildEnv, set to "addr,id,etcd endpoint", makes the test binary a
// zrpc server registered through Muster (TestMain).
const zrpcChildEnv = "MUSTER_GOZERO_ZRPC_CHILD"

// zrpcTimeout is the zrpc server's Timeout (its timeout interceptor), in
// milliseconds; a call named "slow" sleeps far longer.
const zrpcTimeout = 300

// greeter answers with the address it serves at; "slow" sleeps 10s,
// unless the call's context ends first.
type greeter struct {
	greeterpb.UnimplementedGreeterServer
	addr string
}

func (g greeter) SayHello(ctx context.Context, req *greeterpb.HelloRequest) (*greeterpb.HelloReply, error) {
	if req.GetName() == "slow" {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Second):
		}
	}
	return &greeterpb.HelloReply{Message: "hello " + req.GetName(), ServedBy: g.addr}, nil
}

// runZRPCChild is the child process: a zrpc server with go-zero's default
// middlewares (conf.FillDefault: breaker, load shedding, stat, Prometheus)
// and a timeout, registered through a Muster Registrar with
// gozero.Register, serving until go-zero's SIGTERM handler stops it.
func runZRPCChild(spec string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "zrpc child:", err)
		return 2
	}
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		return fail(fmt.Errorf("bad %s %q", zrpcChildEnv, spec))
	}
	addr, id, endpoint := parts[0], parts[1], parts[2]
	cli, err := clientv3.New(etcd.ClientConfig(endpoint))
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	reg, err := etcd.NewRegistrar(cli, etcdopts.Registrar()...)
	if err != nil {
		return fail(err)
	}
	defer reg.Close()
	var c zrpc.RpcServerConf
	if err := conf.FillDefault(&c); err != nil {
		return fail(err)
	}
	c.Name, c.ListenOn, c.Timeout = "user", addr, zrpcTimeout
	c.Log.Mode, c.Log.Level = "console", "error"
	// go-zero's shutdown at its defaults: wrap-up listeners at once
	// (Register's deregistration), shutdown listeners (zrpc's
	// GracefulStop) after 1s, a forced exit after 5.5s. Left zero here:
	// go-zero's proc.Setup writes a value its signal goroutine reads
	// without a lock, which the race detector reports in go-zero itself.
	c.Shutdown = service.ServiceConf{}.Shutdown
	s, err := zrpc.NewServer(c, func(g *grpc.Server) { greeterpb.RegisterGreeterServer(g, greeter{addr: addr}) })
	if err != nil {
		return fail(err)
	}
	if _, err := gozero.Register(reg, registry.Instance{Name: "user", ID: id, Addr: addr}); err != nil {
		return fail(err)
	}
	s.Start() // returns once go-zero's shutdown listener stopped it gracefully
	return 0
}

// zrpcChild is a running child process.
type zrpcChild struct {
	id, addr string
	cmd      *exec.Cmd
	out      *bytes.Buffer
	exited   chan struct{}
	err      error // of Wait, once exited is closed
}

func startZRPCChild(t *testing.T, id, addr, endpoint string) *zrpcChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), zrpcChildEnv+"="+addr+","+id+","+endpoint)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &zrpcChild{id: id, addr: addr, cmd: cmd, out: out, exited: make(chan struct{})}
	go func() {
		ch.err = cmd.Wait()
		close(ch.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-ch.exited
	})
	return ch
}

// freeAddrs returns n loopback addresses free a moment ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return out
}

// A go-zero server keeps zrpc and registers with Muster: three zrpc
// servers (child processes) with go-zero's middlewares, registered through
// gozero.Register, are called through muster:///user; zrpc's timeout
// interceptor ends a slow call; each server in turn gets SIGTERM, leaves
// the registry (drained, then deleted) before it exits, exits by itself
// (code 0: before go-zero's forced exit, which kills with the signal) and
// comes back; the calls made all along, two at a time, all succeed.
func TestZRPCServerRegisteredThroughMuster(t *testing.T) {
	c := etcdtest.Start(t)
	endpoint := c.Endpoints()[0]
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	disc := discovery(t, cli)
	w, err := disc.Watch(ctx, "user")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	addrs := freeAddrs(t, 3)
	children := make([]*zrpcChild, len(addrs))
	for i, addr := range addrs {
		children[i] = startZRPCChild(t, fmt.Sprint("z", i), addr, endpoint)
	}
	registrytest.WaitForWithin(t, w, 60*time.Second, "three zrpc servers registered", registrytest.HasIDs("z0", "z1", "z2"))

	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient("muster:///user", grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithResolvers(resolver.NewBuilder(disc, resolver.WithLogger(quiet))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	client := greeterpb.NewGreeterClient(dial())

	// zrpc's timeout interceptor runs: the slow call ends with
	// DeadlineExceeded at the server's 300ms, long before the client's 10s.
	// It is made on a channel of its own: muster_p2c would rank the server
	// that ran it by its 300 ms for longer than the wait for every server
	// to serve the calls below.
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = greeterpb.NewGreeterClient(dial()).SayHello(sctx, &greeterpb.HelloRequest{Name: "slow"}, grpc.WaitForReady(true))
	clientExpired := sctx.Err()
	scancel()
	if status.Code(err) != codes.DeadlineExceeded || clientExpired != nil {
		t.Fatalf("slow call: %v (the client's own deadline: %v); want DeadlineExceeded from zrpc's timeout interceptor", err, clientExpired)
	}

	var calls, failed atomic.Int64
	var lastErr atomic.Value
	served := sync.Map{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				reply, err := client.SayHello(cctx, &greeterpb.HelloRequest{Name: "u"})
				ccancel()
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					lastErr.Store(err)
					continue
				}
				served.Store(reply.GetServedBy(), true)
			}
		}()
	}
	for _, addr := range addrs {
		waitServed(t, &served, addr)
	}

	for i, ch := range children {
		if err := ch.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		var others []string
		for _, o := range children {
			if o != ch {
				others = append(others, o.id)
			}
		}
		registrytest.WaitForWithin(t, w, 10*time.Second, ch.id+" deregistered on SIGTERM", registrytest.HasIDs(others...))
		// Deregistered while it still serves: in go-zero's wrap-up phase,
		// before zrpc's shutdown listener stops it.
		if err := callDirect(ctx, ch.addr); err != nil {
			t.Fatalf("%s deregistered, but a call to it fails: %v (deregistered only once stopped?)", ch.id, err)
		}
		select {
		case <-ch.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still runs 30s after SIGTERM; output:\n%s", ch.id, ch.out)
		}
		if ch.err != nil {
			t.Fatalf("%s exited with %v (a forced exit is a kill by the signal); output:\n%s", ch.id, ch.err, ch.out)
		}
		served.Delete(ch.addr)
		children[i] = startZRPCChild(t, ch.id, ch.addr, endpoint)
		registrytest.WaitForWithin(t, w, 60*time.Second, ch.id+" registered again", registrytest.HasIDs("z0", "z1", "z2"))
		waitServed(t, &served, ch.addr)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d calls across the rolling restart, %d failed", calls.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d of %d calls failed across the rolling restart; last: %v", failed.Load(), calls.Load(), lastErr.Load())
	}
	for _, ch := range children {
		_ = ch.cmd.Process.Signal(syscall.SIGTERM)
		<-ch.exited
	}
}

// callDirect calls the server at addr itself, not through the registry.
func callDirect(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = greeterpb.NewGreeterClient(conn).SayHello(ctx, &greeterpb.HelloRequest{Name: "direct"})
	return err
}

// waitServed waits until a call served by addr was recorded.
func waitServed(t *testing.T, served *sync.Map, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := served.Load(addr); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call served by %s within 30s", addr)
		}
		time.Sleep(10 * time.Millisecond) // the callers record as they go: nothing to wait on
	}
}
