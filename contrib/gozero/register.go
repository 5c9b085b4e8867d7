package gozero

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/zeromicro/go-zero/core/proc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/musterhq/muster/registry"
)

// Defaults used when an option is not given.
const (
	defaultServingTimeout = time.Minute
	defaultStopTimeout    = 3 * time.Second
)

// ErrClosed is what Registration.Err returns after Close.
var ErrClosed = errors.New("gozero: registration closed")

// Registration is a zrpc server's instance, registered through a Muster
// Registrar while the server serves. Register makes one; its methods are
// safe for concurrent use.
type Registration struct {
	reg    registry.Registrar
	in     registry.Instance
	o      options
	cancel context.CancelFunc
	done   chan struct{} // closed when the registering goroutine ends
	once   sync.Once

	mu  sync.Mutex
	err error // why the instance is not registered; nil once it is
}

type options struct {
	servingTimeout time.Duration
	stopTimeout    time.Duration
}

// Option configures Register.
type Option func(*options) error

// WithServingTimeout bounds how long Register's goroutine waits for the
// server to answer its health check SERVING before it gives up (Err says
// so). The default is one minute; a non-positive value is an error.
func WithServingTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("gozero: WithServingTimeout(%v): the timeout must be positive", d)
		}
		o.servingTimeout = d
		return nil
	}
}

// WithStopTimeout bounds the deregistration go-zero's wrap-up phase runs
// (etcd unreachable, say): past it the instance is left to its lease. The
// default is 3s, within go-zero's 5.5s before its forced exit; a
// non-positive value is an error.
func WithStopTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("gozero: WithStopTimeout(%v): the timeout must be positive", d)
		}
		o.stopTimeout = d
		return nil
	}
}

// Register registers the zrpc server that serves at in.Addr (its
// ListenOn, as clients reach it) through reg, the process's Registrar,
// while the server keeps everything zrpc gives it (its interceptors:
// breaker, load shedding, timeout, Prometheus; its health service). Call
// it before the server's blocking Start, with the server's
// RpcServerConf.Health left on (the default): Register returns at once,
// and its goroutine registers the instance once the server answers its
// gRPC health check SERVING, the order Muster's own servers keep (serve,
// then register).
//
// On SIGTERM or SIGINT go-zero's signal handler (installed by its proc
// package, which zrpc imports) runs its wrap-up listeners at once, its
// shutdown listeners a second later (zrpc's: NOT_SERVING, then
// GracefulStop), and kills the process 5.5s after the signal. Register
// adds a wrap-up listener that deregisters the instance (the etcd
// Registrar drains it first: weight 0, then its key is deleted), so that
// clients stop picking the server during that second, before zrpc stops
// it; the deregistration takes at most WithStopTimeout (3s), well before
// the forced exit. Close the Registrar after the server's Start returns.
//
// in is validated as Registrar.Register does; an invalid instance or
// option is an error.
func Register(reg registry.Registrar, in registry.Instance, opts ...Option) (*Registration, error) {
	o := options{servingTimeout: defaultServingTimeout, stopTimeout: defaultStopTimeout}
	var errs []error
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			errs = append(errs, err)
		}
	}
	if reg == nil {
		errs = append(errs, errors.New("gozero: Register: nil Registrar"))
	}
	if err := in.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("gozero: Register: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registration{reg: reg, in: in.Normalize(), o: o, cancel: cancel, done: make(chan struct{}),
		err: errors.New("gozero: the server has not answered SERVING yet")}
	go r.run(ctx)
	proc.AddWrapUpListener(func() { _ = r.Close() })
	return r, nil
}

// run waits until the server serves, then registers the instance.
func (r *Registration) run(ctx context.Context) {
	defer close(r.done)
	err := r.waitServing(ctx)
	if err == nil {
		err = r.reg.Register(ctx, r.in)
	}
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

// waitServing waits until the server at the instance's address answers
// its health check SERVING, within the serving timeout.
func (r *Registration) waitServing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.servingTimeout)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+r.in.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6,
			Jitter: 0.2, MaxDelay: time.Second}, MinConnectTimeout: time.Second}))
	if err != nil {
		return fmt.Errorf("gozero: the health check of %s: %w", r.in.Addr, err)
	}
	defer conn.Close()
	for {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gozero: the server at %s did not answer SERVING (is RpcServerConf.Health on?): %w", r.in.Addr, errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // the server said NOT_SERVING: ask again
		}
	}
}

// Err returns nil while the instance is registered, else why not: not
// yet serving, an error matching registry.ErrPending while etcd has not
// answered (the Registrar writes the instance when it does), another
// registration error, or ErrClosed after Close.
func (r *Registration) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Done is closed once the registration attempt is over: registered, failed
// (Err says why) or closed.
func (r *Registration) Done() <-chan struct{} { return r.done }

// Close stops a registration not made yet and deregisters the instance,
// within the stop timeout. go-zero's wrap-up phase calls it; it is
// idempotent, and returns the deregistration's error.
func (r *Registration) Close() error {
	var err error
	r.once.Do(func() {
		r.cancel()
		<-r.done
		r.mu.Lock()
		// A registration etcd has not answered yet is kept by the
		// Registrar: deregister it too.
		registered := r.err == nil || errors.Is(r.err, registry.ErrPending)
		r.err = ErrClosed
		r.mu.Unlock()
		if !registered {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.o.stopTimeout)
		defer cancel()
		if err = r.reg.Deregister(ctx, r.in.Name, r.in.ID); err != nil {
			err = fmt.Errorf("gozero: deregister %s/%s: %w", r.in.Name, r.in.ID, err)
		}
	})
	return err
}
