// Package server runs a gRPC server that registers itself in a Muster
// registry once it serves, reports its health through the standard health
// service (grpc.health.v1), and leaves without failing calls.
//
// The function Serve does it in one call, with a registry.Store
// (registry/etcd's Open) and a default shutdown timeout of 30s:
//
//	store, _ := etcd.Open(etcd.ClientConfig("10.0.0.1:2379"))
//	defer store.Close()
//	lis, _ := net.Listen("tcp", ":9000")
//	err := server.Serve(ctx, store, lis, registry.Instance{Name: "user", Version: "v1.4.2", Zone: "eu-1a"},
//		func(s *grpc.Server) { userpb.RegisterUserServer(s, &userService{}) }) // until SIGINT or SIGTERM
//
// New and Run are the same in two steps, for a program that wants the
// Server itself (Ready, Instance, Health) or a Registrar of its own:
//
//	s, _ := server.New(store.Registrar(), registry.Instance{Name: "user", Version: "v1.4.2", Zone: "eu-1a"})
//	userpb.RegisterUserServer(s.GRPC(), &userService{})
//	err := server.Run(ctx, s, lis, 30*time.Second)
//
// # Start and stop
//
// Serve starts serving, warms up (WithWarmup), sets the health status to
// SERVING and only then registers the instance; a registry that does not
// answer does not stop the server from serving (the registrar registers it
// when the registry answers). Shutdown reverses it step by step: see
// Shutdown for the steps and what it returns.
//
// # Warm-up and health
//
// WithWarmup runs a function after the server serves and before anyone
// can find it (load caches, compile templates, open pools); the instance
// is registered only once it returns nil, so its registration time, from
// which a balancer's slow start ramps it, is when it is ready:
//
//	s, _ := server.New(reg, in,
//		server.WithWarmup(func(ctx context.Context) error { return cache.Load(ctx) }),
//		server.WithWarmupRetry(5, time.Second))
//
// While the server runs, its overall health status reaches the registry
// (see Health): an instance that is not SERVING is registered Draining, so
// clients balancing on the registry stop sending it new calls whether or
// not they check health themselves.
//
//	s.Health().SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING) // drained
//	s.Health().SetServingStatus("", healthpb.HealthCheckResponse_SERVING)     // undrained
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
// New installs the server interceptors of package color, so that the calls
// a handler makes with its context carry on the color of the call it
// handles (blue-green and canary releases; docs/RELEASES.md).
// WithoutColorPropagation leaves them out.
//
// A Server is safe for concurrent use; it serves once.
package server
