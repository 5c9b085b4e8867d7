package server_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/examples/user/usersvc"
	"github.com/musterhq/muster/internal/testkit/examplekit"
	"github.com/musterhq/muster/registry"
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
