package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/server"
)

// runServeChild serves greeter instance "serve-child" with the function
// Serve, under a lease of 30s (so that only a deregistration removes it
// quickly), prints the listener's address, and exits 0 once Serve
// returned nil.
func runServeChild(endpoint string) int {
	store, err := etcd.Open(etcd.ClientConfig(endpoint), etcd.WithTTL(30*time.Second), etcd.WithLogger(quiet))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer store.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(lis.Addr())
	err = server.Serve(context.Background(), store, lis, registry.Instance{Name: "greeter", ID: "serve-child"},
		func(*grpc.Server) {}, server.WithLogger(quiet))
	if err != nil {
		fmt.Fprintln(os.Stderr, "Serve:", err)
		return 1
	}
	return 0
}

// openStore opens a Store on the test's etcd, closed at cleanup.
func openStore(t *testing.T, e *env) *etcd.Store {
	t.Helper()
	store, err := etcd.Open(etcd.ClientConfig(e.c.Endpoints()[0]), etcdopts.Fast()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// instances returns how many greeter instances etcd holds.
func instances(t *testing.T, e *env) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.cli.Get(ctx, registry.ServicePrefix(registry.DefaultPrefix, "greeter"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// serveGreeter runs the function Serve for greeter instance "a" on a new
// loopback listener, until cancel; served receives what it returns.
func serveGreeter(t *testing.T, store registry.Store, register func(*grpc.Server), opts ...server.Option) (addr string, cancel context.CancelFunc, served <-chan error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	result := make(chan error, 1)
	go func() {
		result <- server.Serve(ctx, store, lis, registry.Instance{Name: "greeter", ID: "a"}, register,
			append([]server.Option{server.WithLogger(quiet)}, opts...)...)
	}()
	return lis.Addr().String(), cancel, result
}

// The function Serve puts the services on the server (register), serves
// and registers the instance in the store; when its context ends it
// deregisters, drains and returns nil, leaving the store open.
func TestServeRegistersAndLeavesWhenItsContextEnds(t *testing.T) {
	e := newEnv(t)
	store := openStore(t, e)
	registered := make(chan *grpc.Server, 1)
	lisAddr, cancel, served := serveGreeter(t, store, func(s *grpc.Server) { registered <- s }, server.WithDrainDelay(300*time.Millisecond))

	addr, err := testbackend.Call(ctxFor(t), dial(t, e, "muster:///greeter"), grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("a call through the registry: %v", err)
	}
	if addr != lisAddr {
		t.Fatalf("call served by %s, want the listener's %s", addr, lisAddr)
	}
	select {
	case gs := <-registered:
		if _, ok := gs.GetServiceInfo()["grpc.health.v1.Health"]; !ok {
			t.Fatalf("the server handed to register serves %v, want the health service", gs.GetServiceInfo())
		}
	default:
		t.Fatal("Serve did not hand its gRPC server to register")
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve returned %v after its context ended, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return within 20s of its context's end")
	}
	if n := instances(t, e); n != 0 {
		t.Fatalf("%d greeter keys left in etcd after Serve returned, want 0", n)
	}
	if err := store.Registrar().Register(ctxFor(t), registry.Instance{Name: "greeter", ID: "b", Addr: "127.0.0.1:1"}); err != nil {
		t.Fatalf("the store's Registrar after Serve returned: %v, want it still open", err)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A process serving with the function Serve leaves on SIGTERM as Run
// makes it: deregistered long before its lease (30s) would expire, still
// serving through the default drain delay, then exiting cleanly.
func TestServeLeavesOnSIGTERM(t *testing.T) {
	e := newEnv(t)
	cmd, addr := startChild(t, serveChildEnv, e.c.Endpoints()[0])
	key := registry.Key(registry.DefaultPrefix, "greeter", "serve-child")
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := e.cli.Watch(wctx, key, clientv3.WithCreatedNotify())
	<-wch
	deadline := time.Now().Add(10 * time.Second)
	for instances(t, e) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the child did not register within 10s")
		}
		time.Sleep(20 * time.Millisecond) // polling etcd for the registration
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	for deleted := false; !deleted; {
		select {
		case resp := <-wch:
			for _, ev := range resp.Events {
				deleted = deleted || ev.Type == clientv3.EventTypeDelete
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the child's key was not deleted within 10s of SIGTERM (its lease lasts 30s)")
		}
	}
	t.Logf("deregistered %v after SIGTERM", time.Since(signalled).Round(time.Millisecond))

	// Deregistered, and still serving through the drain delay (2s).
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := testbackend.Call(ctxFor(t), conn); err != nil {
		t.Fatalf("a call in the drain delay after deregistration: %v", err)
	}

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the child exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not exit within 30s of SIGTERM")
	}
	t.Logf("exited %v after SIGTERM", time.Since(signalled).Round(time.Millisecond))
	if n := instances(t, e); n != 0 {
		t.Fatalf("%d greeter keys left after the child exited, want 0", n)
	}
}

// The function Serve refuses what New refuses, and a nil store or
// register function, naming it, and closes the listener.
func TestServeRefusesBadArguments(t *testing.T) {
	e := newEnv(t)
	store := openStore(t, e)
	register := func(*grpc.Server) {}
	for _, c := range []struct {
		name     string
		store    registry.Store
		in       registry.Instance
		register func(*grpc.Server)
		opts     []server.Option
		want     string
	}{
		{"nil store", nil, registry.Instance{Name: "greeter"}, register, nil, "nil store"},
		{"nil register", store, registry.Instance{Name: "greeter"}, nil, nil, "nil register function"},
		{"bad name", store, registry.Instance{Name: "Bad Name"}, register, nil, "name"},
		{"shutdown timeout", store, registry.Instance{Name: "greeter"}, register,
			[]server.Option{server.WithShutdownTimeout(0)}, "WithShutdownTimeout: 0s, want a positive timeout"},
	} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		err = server.Serve(context.Background(), c.store, lis, c.in, c.register, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Serve = %v, want an error naming %q", c.name, err, c.want)
		}
		if _, err := lis.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: the listener accepts after Serve failed (%v), want it closed", c.name, err)
		}
	}
	if _, err := server.New(store.Registrar(), registry.Instance{Name: "greeter"}, server.WithShutdownTimeout(-time.Second)); err == nil {
		t.Error("New with WithShutdownTimeout(-1s) succeeded, want an error")
	}
}

// WithShutdownTimeout bounds the function Serve's shutdown: a drain delay
// of 10s is cut short when the timeout (500ms) passes.
func TestServeShutdownTimeoutBoundsTheDrain(t *testing.T) {
	e := newEnv(t)
	_, cancel, served := serveGreeter(t, openStore(t, e), func(*grpc.Server) {},
		server.WithDrainDelay(10*time.Second), server.WithShutdownTimeout(500*time.Millisecond))
	if _, err := testbackend.Call(ctxFor(t), dial(t, e, "muster:///greeter"), grpc.WaitForReady(true)); err != nil {
		t.Fatalf("a call through the registry: %v", err)
	}
	cancel()
	begun := time.Now()
	select {
	case err := <-served:
		t.Logf("Serve returned %v after %v", err, time.Since(begun).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return within 5s of its context's end: the shutdown timeout (500ms) did not cut the drain delay (10s) short")
	}
}
