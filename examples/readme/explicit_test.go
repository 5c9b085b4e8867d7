package readme_test

// The program of docs/LIBRARY.md, between the markers.

// readme:begin
import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/examples/user/usersvc"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
	"github.com/musterhq/muster/server"
)

// runExplicit serves the user service, registered in etcd, and calls it
// through Muster, each part made by hand; it serves until ctx ends or the
// process gets SIGINT or SIGTERM.
func runExplicit(ctx context.Context, etcdURL string, out io.Writer) error {
	cli, err := clientv3.New(etcd.ClientConfig(etcdURL))
	if err != nil {
		return err
	}
	defer cli.Close()

	// Server side: one Registrar (one lease) per process; the server registers once it serves.
	reg, err := etcd.NewRegistrar(cli)
	if err != nil {
		return err
	}
	defer reg.Close() // revokes the lease: every instance leaves at once
	s, err := server.New(reg, registry.Instance{Name: "user", Zone: "eu-1a"})
	if err != nil {
		return err
	}
	userpb.RegisterUserServer(s.GRPC(), &usersvc.Service{Addr: func() string { return s.Instance().Addr }})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	// On SIGTERM or when ctx ends: NOT_SERVING, deregister, drain, stop.
	go func() { served <- server.Run(ctx, s, lis, 30*time.Second) }()

	// Client side: one Discovery per process, one etcd watch per service.
	disc, err := etcd.NewDiscovery(cli)
	if err != nil {
		return err
	}
	defer disc.Close()
	// Calls balance with muster_p2c, preferring the client's zone (see
	// "Choosing the balancer" for muster_wrr or a balancer of gRPC's).
	conn, err := grpc.NewClient("muster:///user?zone=eu-1a",
		grpc.WithResolvers(resolver.NewBuilder(disc)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	// WaitForReady: the first call waits for the first instance to be
	// registered and seen instead of failing at once.
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply, err := userpb.NewUserClient(conn).Get(callCtx, &userpb.GetRequest{Id: "1"}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s, served by %s\n", reply.GetName(), reply.GetServedBy())
	return <-served
}

// readme:end
