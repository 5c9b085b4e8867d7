package server

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc"

	"github.com/musterhq/muster/registry"
)

// Serve is a service's server in one call: a Server that announces in
// through store's Registrar (New), its services put on its gRPC server by
// register, run on lis (Run) until ctx ends or the process gets SIGINT or
// SIGTERM, with the shutdown timeout WithShutdownTimeout sets
// (DefaultShutdownTimeout, 30s).
//
// In order, as Server.Serve and Shutdown say: it serves, warms up
// (WithWarmup), sets its health to SERVING and registers the instance; at
// the end it sets NOT_SERVING, deregisters, serves on through the drain
// delay (WithDrainDelay) while clients stop picking it, and stops once the
// calls in flight have ended. in.Addr may be empty: the instance is then
// registered at the listener's address (see Server.Serve).
//
// It returns nil after a clean shutdown; otherwise the error of New (an
// invalid instance or option; nil store or register), of Server.Serve (a
// refused registration, a failed warm-up) or of Shutdown. lis is closed
// in every case. The store stays the caller's: its Close removes the
// instances its Registrar still holds.
//
// New and Run do the same in two steps, for a program that wants the
// Server itself (Ready, Instance, Health) or announces through a
// Registrar of its own.
func Serve(ctx context.Context, store registry.Store, lis net.Listener, in registry.Instance, register func(*grpc.Server), opts ...Option) error {
	var err error
	switch {
	case store == nil:
		err = errors.New("server: Serve: nil store")
	case register == nil:
		err = errors.New("server: Serve: nil register function: it puts the service on the gRPC server")
	}
	var s *Server
	if err == nil {
		s, err = New(store.Registrar(), in, opts...)
	}
	if err != nil {
		lis.Close()
		return err
	}
	register(s.GRPC())
	return Run(ctx, s, lis, s.opts.shutdownTimeout)
}
