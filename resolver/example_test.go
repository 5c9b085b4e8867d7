package resolver_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/examples/user/usersvc"
	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/resolver"
)

// A channel to "muster:///user" follows the service's instances in etcd:
// here one gRPC server, registered under its listener's address.
func ExampleNewBuilder() {
	// A Registrar and a Discovery (registry/etcd) on an embedded etcd.
	r, err := examplekit.StartRegistry()
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	// The server side: a gRPC server, registered once it serves.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	userpb.RegisterUserServer(gs, &usersvc.Service{Addr: lis.Addr().String})
	go gs.Serve(lis)
	defer gs.Stop()
	in := registry.Instance{Name: "user", ID: "user-1", Addr: lis.Addr().String()}
	if err := r.Registrar.Register(context.Background(), in); err != nil {
		log.Fatal(err)
	}

	// The client side: one Discovery per process, a Builder per channel.
	conn, err := grpc.NewClient("muster:///user",
		grpc.WithResolvers(resolver.NewBuilder(r.Discovery)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	reply, err := userpb.NewUserClient(conn).Get(context.Background(), &userpb.GetRequest{Id: "1"}, grpc.WaitForReady(true))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reply.GetName(), "served by the registered instance:", reply.GetServedBy() == in.Addr)
	// Output: Ada Lovelace served by the registered instance: true
}
