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
	"github.com/musterhq/muster/internal/testkit/exampleetcd"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/server"
)

// A service's main: serve the user service, registered in etcd while it
// serves. Run returns once ctx ends (or on SIGINT or SIGTERM) and Shutdown
// has deregistered, drained and stopped the server.
func ExampleRun() {
	// A client of an embedded etcd; a program takes
	// clientv3.New(etcd.ClientConfig("http://etcd-0:2379", ...)).
	cli, stop, err := exampleetcd.Client()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	reg, err := etcd.NewRegistrar(cli) // one per process
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()

	s, err := server.New(reg, registry.Instance{Name: "user", ID: "user-1", Zone: "eu-1a"})
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
	fmt.Println("registered:", reg.Status().Registered, reg.Status().Instances)
	stop() // as SIGTERM would
	fmt.Println("run:", <-done, "instances left:", reg.Status().Instances)
	fmt.Println("shutdown again:", errors.Is(s.Shutdown(context.Background()), server.ErrServerClosed))
	// Output:
	// registered: true 1
	// run: <nil> instances left: 0
	// shutdown again: true
}
