package demo

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/greeterpb"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/server"
)

// backend is one greeter instance with its own etcd client and registrar,
// as its own process would have.
type backend struct {
	name   string
	addr   string
	cli    *clientv3.Client
	reg    *etcd.Registrar
	srv    *server.Server
	served chan error
	delay  atomic.Int64 // added to each call, nanoseconds
	state  atomic.Value // string shown in the table

	stopOnce sync.Once
}

type greeter struct {
	greeterpb.UnimplementedGreeterServer
	b *backend
}

func (g greeter) SayHello(ctx context.Context, req *greeterpb.HelloRequest) (*greeterpb.HelloReply, error) {
	if d := time.Duration(g.b.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	return &greeterpb.HelloReply{Message: "hello " + req.GetName(), ServedBy: g.b.name}, nil
}

// startBackend serves a greeter on a loopback port and registers it.
func startBackend(endpoint, name string, log *slog.Logger) (*backend, error) {
	cfg := etcd.ClientConfig(endpoint)
	cfg.DialTimeout = 2 * time.Second
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, err
	}
	reg, err := etcd.NewRegistrar(cli, etcd.WithTTL(leaseTTL), etcd.WithBackoff(100*time.Millisecond, time.Second),
		etcd.WithRequestTimeout(time.Second), etcd.WithLogger(log))
	if err != nil {
		cli.Close()
		return nil, err
	}
	b := &backend{name: name, cli: cli, reg: reg, served: make(chan error, 1)}
	b.state.Store("serving")
	b.srv, err = server.New(reg, registry.Instance{Name: service, ID: name, Version: "v1"},
		server.WithDrainDelay(time.Second), server.WithRegisterTimeout(time.Second), server.WithLogger(log))
	if err != nil {
		reg.Close()
		cli.Close()
		return nil, err
	}
	greeterpb.RegisterGreeterServer(b.srv.GRPC(), greeter{b: b})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		reg.Close()
		cli.Close()
		return nil, err
	}
	b.addr = lis.Addr().String()
	go func() { b.served <- b.srv.Serve(lis) }()
	<-b.srv.Ready()
	return b, nil
}

// crash ends the backend the way a killed process ends: its connections
// to etcd and to clients cut at once, nothing deregistered, no lease
// revoked; its key leaves when the lease expires, up to the TTL later.
func (b *backend) crash() {
	b.stopOnce.Do(func() {
		b.state.Store("crashed")
		b.cli.Close() // first: no renewal, no revocation from here on
		b.srv.GRPC().Stop()
		<-b.served
		// Only ends the registrar's goroutine: with its client closed it
		// cannot revoke the lease, as a killed process cannot.
		_ = b.reg.Close()
	})
}

// shutdown takes the backend out gracefully. Later calls, and calls after
// crash, do nothing.
func (b *backend) shutdown(ctx context.Context) {
	b.stopOnce.Do(func() {
		b.state.Store("draining")
		_ = b.srv.Shutdown(ctx)
		<-b.served
		_ = b.reg.Close()
		b.cli.Close()
		b.state.Store("stopped")
	})
}
