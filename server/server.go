package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/color"
	"github.com/musterhq/muster/promsd"
	"github.com/musterhq/muster/registry"
)

// ErrServerClosed is returned by Serve after Shutdown, and by Serve and
// Shutdown called on a server already shut down.
var ErrServerClosed = errors.New("server: closed")

// DrainMessage is the message of the Unavailable status that ends a stream
// still open when a server drains. Unavailable is the status gRPC clients
// treat as retryable: reopen the stream through the same channel and the
// balancer picks another instance.
const DrainMessage = "muster: server is shutting down; reopen the stream"

// Server runs a gRPC server that registers itself in a registry once it
// serves, reports its health through the standard health service, and
// leaves without failing calls (see Shutdown).
type Server struct {
	reg    registry.Registrar
	inst   registry.Instance
	opts   options
	log    *slog.Logger
	gs     *grpc.Server
	health *health.Server

	drainCtx context.Context // done when open streams must end
	drain    context.CancelFunc
	leaving  context.Context // done when Shutdown begins or the server stops
	leave    context.CancelFunc
	follower sync.WaitGroup // followHealth
	ready    chan struct{}
	pending  sync.WaitGroup // logRegistered, while it waits

	mu         sync.Mutex
	started    bool
	shutdown   bool
	advertised registry.Instance
}

// New returns a Server that will announce in through reg. in.Name is
// required; in.Addr may be empty, in which case Serve derives it from the
// listener (see Serve). Register services on GRPC() before calling Serve.
func New(reg registry.Registrar, in registry.Instance, opts ...Option) (*Server, error) {
	if reg == nil {
		return nil, errors.New("server: New: nil registrar")
	}
	if err := registry.ValidateName(in.Name); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	if o.metricsAddr != "" {
		in.Metadata = maps.Clone(in.Metadata)
		if in.Metadata == nil {
			in.Metadata = map[string]string{}
		}
		in.Metadata[promsd.MetadataKey] = o.metricsAddr
	}
	s := &Server{
		reg:    reg,
		inst:   in,
		opts:   o,
		log:    o.logger.With("component", "muster.server", "service", in.Name),
		health: health.NewServer(),
		ready:  make(chan struct{}),
	}
	s.drainCtx, s.drain = context.WithCancel(context.Background())
	s.leaving, s.leave = context.WithCancel(context.Background())
	var gopts []grpc.ServerOption
	if !o.noColor {
		gopts = append(gopts, grpc.ChainUnaryInterceptor(color.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(color.StreamServerInterceptor()))
	}
	gopts = append(append(gopts, o.grpcOptions...), grpc.ChainStreamInterceptor(s.endStreamsOnDrain))
	s.gs = grpc.NewServer(gopts...)
	healthpb.RegisterHealthServer(s.gs, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// GRPC returns the underlying gRPC server, to register services on.
func (s *Server) GRPC() *grpc.Server { return s.gs }

// Health returns the server's health service. Serve sets the overall
// status ("") to SERVING once warmed up (WithWarmup) and Shutdown sets
// every status to NOT_SERVING. Between the two the overall status reaches
// the registry: while it is anything but SERVING the instance is
// registered Draining, so that every client balancing on the registry
// (muster_p2c, muster_wrr, muster xds) stops sending it new calls, and
// when it is SERVING again the instance is registered as before. An
// operator's drain (muster drain) is a separate override that this never
// undoes. Per-service statuses stay local to the health service.
func (s *Server) Health() *health.Server { return s.health }

// Ready returns a channel closed once Serve is serving and has made its
// first registration attempt (it may still be pending while the registry
// is unreachable).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Instance returns the instance as registered, with its advertised
// address; the zero Instance before Ready.
func (s *Server) Instance() registry.Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.advertised
}

// ListenAndServe listens on the TCP address addr and calls Serve.
func (s *Server) ListenAndServe(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: listen: %w", err)
	}
	return s.Serve(lis)
}

// Serve serves on lis and registers the instance, in this order: serve,
// warm up (WithWarmup), set health to SERVING, register. The advertised
// address is the instance's Addr if set, else the listener's address, with
// a wildcard host replaced by the first routable address of the machine (a
// global unicast IPv4 address of an interface that is up and not a
// loopback, else IPv6, else 127.0.0.1); set Addr explicitly in a container
// or behind NAT.
//
// If the registry does not answer within the register timeout
// (WithRegisterTimeout), Serve serves on and the registrar registers the
// instance as soon as the registry answers; both are logged. An instance
// the registrar refuses (invalid, permission denied) stops the server and
// is returned, and so does a failed warm-up, with nothing registered.
// Serve blocks until the server stops; after Shutdown it returns
// ErrServerClosed. A Server serves once.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	switch {
	case s.shutdown:
		s.mu.Unlock()
		lis.Close()
		return ErrServerClosed
	case s.started:
		s.mu.Unlock()
		lis.Close()
		return errors.New("server: Serve called twice")
	}
	s.started = true
	s.mu.Unlock()

	in := s.inst
	addr, err := advertise(in.Addr, lis.Addr())
	if err != nil {
		lis.Close()
		return err
	}
	in.Addr = addr
	if err := in.Validate(); err != nil {
		lis.Close()
		return err
	}

	served := make(chan error, 1)
	go func() { served <- s.gs.Serve(lis) }()
	// abort stops a server that never registered and returns err.
	abort := func(err error) error {
		close(s.ready)
		s.gs.Stop()
		<-served
		return err
	}
	if err := s.warmUp(); err != nil {
		s.mu.Lock()
		shut := s.shutdown
		s.mu.Unlock()
		if shut {
			return abort(ErrServerClosed)
		}
		return abort(fmt.Errorf("server: warm-up of %s: %w", in.Name, err))
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	ctx, cancel := context.WithTimeout(context.Background(), s.opts.registerTimeout)
	err = s.reg.Register(ctx, in)
	cancel()
	switch {
	case err == nil:
		s.log.Info("serving and registered", "addr", in.Addr)
	case errors.Is(err, registry.ErrPending):
		s.log.Warn("serving; registration pending until the registry answers", "addr", in.Addr, "error", err)
		if sr, ok := s.reg.(registry.StatusReporter); ok {
			s.pending.Add(1)
			go s.logRegistered(sr, time.Now())
		}
	default:
		return abort(fmt.Errorf("server: register %s: %w", in.Name, err))
	}
	s.mu.Lock()
	s.advertised = in.Normalize()
	s.mu.Unlock()
	s.follower.Add(1)
	go s.followHealth(in)
	close(s.ready)

	err = <-served
	s.leave() // ends followHealth if the server stopped on its own
	s.follower.Wait()
	s.drain() // ends logRegistered if the server stopped on its own
	s.pending.Wait()
	s.mu.Lock()
	shut := s.shutdown
	s.mu.Unlock()
	if shut {
		return ErrServerClosed
	}
	return err
}

// Shutdown takes the server out of service without failing calls, in this
// order:
//
//  1. every health status becomes NOT_SERVING (clients that check health
//     stop picking the server at once);
//  2. the instance is deregistered (the etcd Registrar writes it Draining,
//     then deletes it, so that clients release it at once rather than
//     holding it for the grace they give an instance that vanished while
//     serving, package resolver);
//  3. Shutdown waits the drain delay (WithDrainDelay, DefaultDrainDelay)
//     while the server still serves, so that clients see the change and
//     stop picking it;
//  4. streams still open end with codes.Unavailable and DrainMessage, a
//     status clients retry by reopening the stream;
//  5. GracefulStop: no new calls, in-flight calls run to completion;
//  6. if ctx ends first, Stop closes every connection at once.
//
// Shutdown returns ctx's error when the server had to be stopped hard, and
// the deregistration error (the instance then leaves with its lease), else
// nil. Each step is logged at Info (WithLogger), so an operator sees the
// way out. It does not close the registrar. Later calls return
// ErrServerClosed. A Server cannot be reused.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.shutdown = true
	started := s.started
	s.mu.Unlock()
	s.leave() // a warm-up in progress ends (Serve then gives up), followHealth ends
	if started {
		// Let a Serve in progress finish registering, so that the
		// instance is deregistered below rather than left behind.
		select {
		case <-s.ready:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	in, registered := s.advertised, s.advertised.Name != ""
	s.mu.Unlock()

	begun := time.Now()
	s.follower.Wait() // its last write must not follow the deregistration
	s.health.Shutdown()
	var errs []error
	if registered {
		s.log.Info("shutting down: health NOT_SERVING; deregistering", "addr", in.Addr, "id", in.ID)
		if err := s.reg.Deregister(ctx, in.Name, in.ID); err != nil {
			errs = append(errs, fmt.Errorf("server: deregister: %w", err))
			s.log.Warn("deregistration failed; the instance leaves when the registrar's lease ends", "error", err)
		}
		s.log.Info("draining: still serving while clients stop picking this instance", "drain_delay", s.opts.drainDelay)
		timer := time.NewTimer(s.opts.drainDelay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}
	s.log.Info("stopping: open streams end with UNAVAILABLE; waiting for calls in flight")
	s.drain()
	s.pending.Wait()
	stopped := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.gs.Stop()
		<-stopped
		errs = append(errs, fmt.Errorf("server: graceful stop cut short: %w", ctx.Err()))
		s.log.Warn("shutdown deadline passed; connections closed with calls in flight", "took", time.Since(begun).Round(time.Millisecond))
		return errors.Join(errs...)
	}
	s.log.Info("stopped", "took", time.Since(begun).Round(time.Millisecond))
	return errors.Join(errs...)
}

// warmUp runs the warm-up (WithWarmup), retrying it as WithWarmupRetry
// allows, and returns its last error; nil if there is none or it
// succeeded. It gives up when Shutdown begins.
func (s *Server) warmUp() error {
	if s.opts.warmup == nil {
		return nil
	}
	begun := time.Now()
	var err error
	for attempt := 1; ; attempt++ {
		if err = s.opts.warmup(s.leaving); err == nil {
			s.log.Info("warmed up", "took", time.Since(begun).Round(time.Millisecond), "attempts", attempt)
			return nil
		}
		if attempt == s.opts.warmupAttempts || s.leaving.Err() != nil {
			if attempt > 1 {
				err = fmt.Errorf("%d attempts, the last: %w", attempt, err)
			}
			return err
		}
		s.log.Warn("warm-up failed; retrying", "attempt", attempt, "of", s.opts.warmupAttempts, "backoff", s.opts.warmupBackoff, "error", err)
		timer := time.NewTimer(s.opts.warmupBackoff)
		select {
		case <-timer.C:
		case <-s.leaving.Done():
			timer.Stop()
			return err
		}
	}
}

// logRegistered waits until a registration that was pending when Serve
// started is written, and logs it once with how long it took; it gives up
// when the server drains.
func (s *Server) logRegistered(sr registry.StatusReporter, since time.Time) {
	defer s.pending.Done()
	if sr.WaitRegistered(s.drainCtx) == nil {
		s.log.Info("registered; the registry answered", "pending_for", time.Since(since).Round(100*time.Millisecond))
	}
}

// endStreamsOnDrain gives each stream a context that ends when the server
// drains, and turns the end it causes into an Unavailable status.
func (s *Server) endStreamsOnDrain(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	stop := context.AfterFunc(s.drainCtx, cancel)
	defer stop()
	err := handler(srv, drainableStream{ServerStream: ss, ctx: ctx})
	if s.drainCtx.Err() != nil && ss.Context().Err() == nil {
		return status.Error(codes.Unavailable, DrainMessage)
	}
	return err
}

type drainableStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (d drainableStream) Context() context.Context { return d.ctx }

// Run serves s on lis until ctx ends or the process receives SIGINT or
// SIGTERM, then shuts it down, allowing timeout for Shutdown. It returns
// nil after a clean shutdown.
func Run(ctx context.Context, s *Server, lis net.Listener, timeout time.Duration) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutdown requested (SIGINT, SIGTERM or the context ended)", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := s.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
