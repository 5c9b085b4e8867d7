package readme_test

// The program of README.md, between the markers.

// readme:begin
import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/examples/user/usersvc"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
	"github.com/musterhq/muster/server"
)

// run serves the user service, registered in etcd, and calls it through
// Muster; it serves until ctx ends or the process gets SIGINT or SIGTERM.
func run(ctx context.Context, etcdURL string, out io.Writer) error {
	// The registry: the process's etcd client, Registrar and Discovery.
	store, err := etcd.Open(etcd.ClientConfig(etcdURL))
	if err != nil {
		return err
	}
	defer store.Close()

	// Server side: serve, then register; on SIGTERM or when ctx ends,
	// deregister, drain and stop (within 30s).
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	in := registry.Instance{Name: "user", Zone: "eu-1a"}
	served := make(chan error, 1)
	go func() {
		served <- server.Serve(ctx, store, lis, in, func(s *grpc.Server) {
			userpb.RegisterUserServer(s, &usersvc.Service{Addr: lis.Addr().String})
		})
	}()

	// Client side: calls balance over the instances of user (muster_p2c),
	// preferring the client's zone. The credentials are the caller's choice.
	conn, err := resolver.Dial(store, "user?zone=eu-1a", grpc.WithTransportCredentials(insecure.NewCredentials()))
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
