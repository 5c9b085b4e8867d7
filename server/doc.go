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
// when the registry answers). Shutdown reverses it: NOT_SERVING, deregister, wait the drain
// delay while still serving, end open streams, GracefulStop, and Stop if
// its context ends first. See Shutdown for the exact contract.
//
// # Warm-up
//
// WithWarmup runs a function after the server serves and before anyone
// can find it: no client of the registry sees the instance, and its health
// says NOT_SERVING, until the function returns nil. It may call the server
// itself (load caches, compile templates, open pools). A warm-up that
// fails, after the attempts WithWarmupRetry allows, makes Serve (and Run)
// return an error wrapping it, with nothing registered:
//
//	s, _ := server.New(reg, in,
//		server.WithWarmup(func(ctx context.Context) error { return cache.Load(ctx) }),
//		server.WithWarmupRetry(5, time.Second))
//
// The instance's registration time is when the warm-up ended, so a
// balancer's slow start ("slowStart" in the muster_p2c and muster_wrr
// config) ramps it from when it is ready.
//
// # Health in the registry
//
// While the server runs, its overall health status (Health, service "")
// reaches the registry: when it is anything but SERVING the instance is
// registered Draining (weight 0), so clients balancing on the registry
// stop sending it new calls within their convergence time (milliseconds
// on a local network) whether or not they check health themselves; when
// it is SERVING again the instance is registered as it was, keeping its
// registration time. An operator's drain (muster drain, a separate
// override) is never undone by this.
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
// New installs color.UnaryServerInterceptor and
// color.StreamServerInterceptor first: a handler's context carries the
// color of the call it handles (header x-muster-color), so the calls it
// makes with that context reach the same color of the next service where
// one is deployed (blue-green and canary releases; see package color and
// docs/RELEASES.md). WithoutColorPropagation leaves them out.
//
// A Server is safe for concurrent use; it serves once.
package server
