package resolver_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

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

// Dial opens a channel to a service of a Store: here two instances of
// user, between which calls balance (muster_p2c) without being told.
func ExampleDial() {
	// A Store (registry/etcd's Open) on an embedded etcd.
	store, stop, err := examplekit.OpenStore()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	addrs, stopBackends, err := examplekit.UserBackends(2)
	if err != nil {
		log.Fatal(err)
	}
	defer stopBackends()
	for i, addr := range addrs {
		in := registry.Instance{Name: "user", ID: fmt.Sprintf("user-%d", i+1), Addr: addr}
		if err := store.Registrar().Register(context.Background(), in); err != nil {
			log.Fatal(err)
		}
	}

	// The credentials are the caller's: plain text, on loopback.
	conn, err := resolver.Dial(store, "user", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	servedBy := map[string]bool{}
	for len(servedBy) < len(addrs) {
		reply, err := userpb.NewUserClient(conn).Get(ctx, &userpb.GetRequest{Id: "1"}, grpc.WaitForReady(true))
		if err != nil {
			log.Fatal(err)
		}
		servedBy[reply.GetServedBy()] = true
	}
	fmt.Println("calls reached both instances:", servedBy[addrs[0]] && servedBy[addrs[1]])
	// Output: calls reached both instances: true
}
