// Package examplekit holds what the runnable examples (Example functions)
// of Muster's packages share. An example cannot take a *testing.T, so it
// cannot use etcdtest: StartEtcd starts one internal/embedetcd server in a
// temporary directory, on free loopback ports, and Close stops it and
// removes the directory.
//
// A typical example takes a client of such a server, as a program takes
// clientv3.New(etcd.ClientConfig(endpoints...)):
//
//	cli, stop, err := examplekit.EtcdClient()
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer stop()
//
// An example about what runs on a registry, rather than about the registry
// itself, starts one with StartRegistry: a Registrar and a Discovery of
// registry/etcd over such a client.
//
// Loaded waits for a watcher's first loaded snapshot, as every example that
// prints a service does; UserBackends starts gRPC servers for the examples
// that call through a balancer.
//
// Close ends every goroutine StartEtcd began, so the package's goleak check
// (with etcdtest.LeakOptions) stays green.
package examplekit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/examples/user/usersvc"
	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/internal/testkit/proctest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// startAttempts is how often StartEtcd tries again when a port it picked was
// taken before the server bound it.
const startAttempts = 5

// Server is a running embedded etcd server in a temporary directory.
type Server struct {
	*embedetcd.Server
	dir string
}

// StartEtcd starts a single-member etcd server on free loopback ports, with
// no logging, and returns once it serves clients (within a minute).
func StartEtcd() (*Server, error) {
	dir, err := os.MkdirTemp("", "muster-example-etcd-")
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		cfg, err := config(dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		srv, err := embedetcd.Start(context.Background(), cfg)
		if err == nil {
			return &Server{Server: srv, dir: dir}, nil
		}
		if !errors.Is(err, embedetcd.ErrAddrInUse) || attempt == startAttempts {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// config returns the configuration of a server in dir on two free ports.
func config(dir string) (embedetcd.Config, error) {
	var ports proctest.Ports
	defer ports.Release()
	client, err := ports.Pick("127.0.0.1")
	if err != nil {
		return embedetcd.Config{}, err
	}
	peer, err := ports.Pick("127.0.0.1")
	if err != nil {
		return embedetcd.Config{}, err
	}
	return embedetcd.Config{
		Dir:       dir + "/etcd",
		Name:      "example",
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", client),
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", peer),
	}, nil
}

// Close stops the server and removes its data directory. It is
// idempotent.
func (s *Server) Close() error {
	err := s.Server.Close()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

// EtcdClient starts a server (see StartEtcd) and returns a client of it,
// configured by etcd.ClientConfig, and stop, which closes the client and
// the server.
func EtcdClient() (cli *clientv3.Client, stop func(), err error) {
	srv, err := StartEtcd()
	if err != nil {
		return nil, nil, err
	}
	cli, err = clientv3.New(etcd.ClientConfig(srv.Endpoint()))
	if err != nil {
		_ = srv.Close()
		return nil, nil, err
	}
	return cli, func() { _ = cli.Close(); _ = srv.Close() }, nil
}

// OpenStore starts a server (see StartEtcd) and returns the Store on it
// that etcd.Open opens with etcd.ClientConfig, and stop, which closes the
// store and the server.
func OpenStore() (store *etcd.Store, stop func(), err error) {
	srv, err := StartEtcd()
	if err != nil {
		return nil, nil, err
	}
	store, err = etcd.Open(etcd.ClientConfig(srv.Endpoint()))
	if err != nil {
		_ = srv.Close()
		return nil, nil, err
	}
	return store, func() { _ = store.Close(); _ = srv.Close() }, nil
}

// Registry is a client of a server started by StartEtcd, with a Registrar and
// a Discovery over it (registry/etcd's defaults).
type Registry struct {
	Client    *clientv3.Client
	Registrar *etcd.Registrar
	Discovery *etcd.Discovery
	stop      func()
}

// StartRegistry starts a server (see StartEtcd) and returns a Registry on
// it.
func StartRegistry() (*Registry, error) {
	cli, stop, err := EtcdClient()
	if err != nil {
		return nil, err
	}
	r := &Registry{Client: cli, stop: stop}
	if r.Registrar, err = etcd.NewRegistrar(cli); err == nil {
		r.Discovery, err = etcd.NewDiscovery(cli)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Close closes the Discovery, the Registrar (revoking its lease), the
// client and the server.
func (r *Registry) Close() {
	if r.Discovery != nil {
		_ = r.Discovery.Close()
	}
	if r.Registrar != nil {
		_ = r.Registrar.Close()
	}
	r.stop()
}

// Loaded returns w's first loaded snapshot, waiting for it; the zero
// Snapshot if w is closed first.
func Loaded(w registry.Watcher) registry.Snapshot {
	for {
		if s := w.Snapshot(); s.Loaded {
			return s
		}
		if _, open := <-w.Updates(); !open {
			return registry.Snapshot{}
		}
	}
}

// UserBackends starts n gRPC servers of the example user service
// (examples/user/usersvc) on loopback ports and returns their addresses,
// and stop, which stops them all.
func UserBackends(n int) (addrs []string, stop func(), err error) {
	var servers []*grpc.Server
	stop = func() {
		for _, gs := range servers {
			gs.Stop()
		}
	}
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, err
		}
		gs := grpc.NewServer()
		userpb.RegisterUserServer(gs, &usersvc.Service{Addr: lis.Addr().String})
		go func() { _ = gs.Serve(lis) }()
		servers = append(servers, gs)
		addrs = append(addrs, lis.Addr().String())
	}
	return addrs, stop, nil
}
