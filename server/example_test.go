package server_test

import (
	"context"
	"errors"
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
	"github.com/musterhq/muster/server"
)

// A service's main: serve the user service, registered in etcd while it
// serves. Run returns once ctx ends (or on SIGINT or SIGTERM) and Shutdown
// has deregistered, drained and stopped the server.
func ExampleRun() {
	// A Registrar and a Discovery (registry/etcd) on an embedded etcd.
	r, err := examplekit.StartRegistry()
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	s, err := server.New(r.Registrar, registry.Instance{Name: "user", ID: "user-1", Zone: "eu-1a"})
	if err != nil {
		log.Fatal(err)
	}
	userpb.RegisterUserServer(s.GRPC(), &usersvc.Service{Addr: func() string { return s.Instance().Addr }})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, s, lis, 30*time.Second) }()

	<-s.Ready()
	fmt.Println("registered:", r.Registrar.Status().Registered, r.Registrar.Status().Instances)
	stop() // as SIGTERM would
	fmt.Println("run:", <-done, "instances left:", r.Registrar.Status().Instances)
	fmt.Println("shutdown again:", errors.Is(s.Shutdown(context.Background()), server.ErrServerClosed))
	// Output:
	// registered: true 1
	// run: <nil> instances left: 0
	// shutdown again: true
}

// A service's main in one call: Serve registers the instance in the Store
// once it serves, and leaves (deregisters, drains, stops) when ctx ends
// or the process gets SIGINT or SIGTERM.
func ExampleServe() {
	// A Store (registry/etcd's Open) on an embedded etcd.
	store, stop, err := examplekit.OpenStore()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- server.Serve(ctx, store, lis, registry.Instance{Name: "user", Zone: "eu-1a"}, func(s *grpc.Server) {
			userpb.RegisterUserServer(s, &usersvc.Service{Addr: lis.Addr().String})
		})
	}()

	// A client of the same Store finds it.
	conn, err := resolver.Dial(store, "user", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	callCtx, callCancel := context.WithTimeout(ctx, 30*time.Second)
	defer callCancel()
	reply, err := userpb.NewUserClient(conn).Get(callCtx, &userpb.GetRequest{Id: "1"}, grpc.WaitForReady(true))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("served by the listener:", reply.GetServedBy() == lis.Addr().String())
	cancel() // as SIGTERM would
	fmt.Println("serve:", <-served)
	// Output:
	// served by the listener: true
	// serve: <nil>
}
