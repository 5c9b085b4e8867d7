// Package server runs a gRPC server that registers itself in a Muster
// registry once it serves, reports its health through the standard health
// service (grpc.health.v1), and leaves without failing calls.
//
//	reg, _ := etcd.NewRegistrar(cli)
//	defer reg.Close()
//	s, _ := server.New(reg, registry.Instance{Name: "user", Version: "v1.4.2", Zone: "eu-1a"})
//	userpb.RegisterUserServer(s.GRPC(), &userService{})
//	lis, _ := net.Listen("tcp", ":9000")
//	err := server.Run(ctx, s, lis, 30*time.Second) // until SIGINT or SIGTERM
//
// # Start and stop
//
// Serve starts serving, sets the health status to SERVING and only then
// registers the instance; a registry that does not answer does not stop
// the server from serving (the registrar registers it when the registry
// answers). Shutdown reverses it: NOT_SERVING, deregister, wait the drain
// delay while still serving, end open streams, GracefulStop, and Stop if
// its context ends first. See Shutdown for the exact contract.
//
// # Streams during a drain
//
// A stream still open when the server drains ends with codes.Unavailable
// and DrainMessage. Clients reopen it through the same channel, which picks
// another instance:
//
//	for {
//		stream, err := client.Subscribe(ctx, req)
//		if err == nil {
//			err = consume(stream) // until the stream ends
//		}
//		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
//			return err
//		}
//		// Unavailable: the server drained or the connection broke; reopen.
//	}
//
// # Colors along the call chain
//
// New installs color.UnaryServerInterceptor and
// color.StreamServerInterceptor first: a handler's context carries the
// color of the call it handles (header x-muster-color), so the calls it
// makes with that context reach the same color of the next service where
// one is deployed (blue-green and canary releases; see package color and
// docs/RELEASES.md). WithoutColorPropagation leaves them out.
//
// A Server is safe for concurrent use; it serves once.
package server
