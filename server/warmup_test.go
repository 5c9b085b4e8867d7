package server_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/server"
)

// watchGreeter follows the greeter service through the env's Discovery,
// as every client of the registry does.
func watchGreeter(t *testing.T, e *env) registry.Watcher {
	t.Helper()
	w, err := e.disc.Watch(context.Background(), "greeter")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	registrytest.WaitFor(t, w, "the first load", func(s registry.Snapshot) bool { return s.Loaded })
	return w
}

func hasInstance(id string) func(registry.Snapshot) bool {
	return func(s registry.Snapshot) bool {
		for _, in := range s.Instances {
			if in.ID == id {
				return true
			}
		}
		return false
	}
}

// TestWarmupRunsBeforeRegistration: while the warm-up runs, the server
// already serves (the warm-up calls it), its health is NOT_SERVING and no
// watcher of the registry has seen the instance; once it returns the
// instance is registered and SERVING. Without the warm-up step before the
// registration the watcher sees the instance during the warm-up.
func TestWarmupRunsBeforeRegistration(t *testing.T) {
	e := newEnv(t)
	w := watchGreeter(t, e)
	seer := watchGreeter(t, e) // a second client, followed in the background
	var seen atomic.Bool       // seer saw the instance
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if hasInstance("a")(seer.Snapshot()) {
				seen.Store(true)
				return
			}
			select {
			case <-seer.Updates():
			case <-watchCtx.Done():
				return
			}
		}
	}()
	defer func() { stopWatch(); <-watched }()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	entered, release := make(chan struct{}), make(chan struct{})
	warmed := make(chan string, 1) // the warm-up's self-call's answer
	warm := func(ctx context.Context) error {
		close(entered)
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err != nil {
			return err
		}
		warmed <- resp.Status.String()
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b := e.launchOn(t, "a", lis, server.WithWarmup(warm))
	select {
	case <-entered:
	case err := <-b.err:
		t.Fatalf("Serve returned %v before the warm-up ran", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the warm-up did not start within 10s")
	}
	var st string
	select {
	case st = <-warmed:
	case <-time.After(10 * time.Second):
		t.Fatal("the warm-up's call to its own server did not answer within 10s")
	}
	if st != healthpb.HealthCheckResponse_NOT_SERVING.String() {
		t.Fatalf("health during the warm-up = %s, want NOT_SERVING", st)
	}
	// An instance registered now, after a's warm-up began, reaches the
	// watcher: a, had it been registered when it started serving, would
	// be there too.
	e.start(t, "b")
	registrytest.WaitFor(t, w, "holding b, registered during a's warm-up", hasInstance("b"))
	resp, err := e.cli.Get(context.Background(), registry.Key(registry.DefaultPrefix, "greeter", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if st := b.reg.Status(); len(resp.Kvs) != 0 || seen.Load() || hasInstance("a")(w.Snapshot()) || st.Instances != 0 {
		t.Fatalf("the instance is in the registry during its warm-up (keys %d, a watcher saw it %v, its registrar holds %d instances)",
			len(resp.Kvs), seen.Load(), st.Instances)
	}
	select {
	case <-b.s.Ready():
		t.Fatal("Ready closed during the warm-up")
	default:
	}
	close(release)
	registrytest.WaitFor(t, w, "holding the warmed-up instance", hasInstance("a"))
	<-b.s.Ready()
	direct := directConn(t, addr)
	got, err := healthpb.NewHealthClient(direct).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || got.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after the warm-up = %v, %v; want SERVING", got, err)
	}
}

// TestFailedWarmupNeverRegisters: a warm-up that fails makes Serve return
// an error wrapping it, and the instance never reaches the registry.
func TestFailedWarmupNeverRegisters(t *testing.T) {
	e := newEnv(t)
	w := watchGreeter(t, e)
	cold := errors.New("cache not loaded")
	var calls atomic.Int32
	b := e.launchOn(t, "a", nil, server.WithWarmup(func(context.Context) error {
		calls.Add(1)
		return cold
	}), server.WithWarmupRetry(3, time.Millisecond))
	var err error
	select {
	case err = <-b.err:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s of a failing warm-up")
	}
	b.err <- server.ErrServerClosed // for the cleanup's check
	if !errors.Is(err, cold) || !strings.Contains(err.Error(), "warm-up") {
		t.Fatalf("Serve = %v, want an error about the warm-up wrapping %v", err, cold)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("the warm-up ran %d times, want the 3 attempts allowed", n)
	}
	resp, gerr := e.cli.Get(context.Background(), registry.Key(registry.DefaultPrefix, "greeter", "a"))
	if gerr != nil {
		t.Fatal(gerr)
	}
	if len(resp.Kvs) != 0 || len(w.Snapshot().Instances) != 0 {
		t.Fatalf("a server whose warm-up failed is registered: keys %d, watcher %v", len(resp.Kvs), w.Snapshot().Instances)
	}
}

// TestRetriedWarmupRegisters: a warm-up that fails twice and then succeeds
// registers the instance when retries allow it.
func TestRetriedWarmupRegisters(t *testing.T) {
	e := newEnv(t)
	w := watchGreeter(t, e)
	var calls atomic.Int32
	b := e.launchOn(t, "a", nil, server.WithWarmup(func(context.Context) error {
		if calls.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	}), server.WithWarmupRetry(5, 10*time.Millisecond))
	select {
	case <-b.s.Ready():
	case err := <-b.err:
		t.Fatalf("Serve = %v, want the third warm-up to succeed", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready within 10s")
	}
	registrytest.WaitFor(t, w, "holding the instance", hasInstance("a"))
	if n := calls.Load(); n != 3 {
		t.Fatalf("the warm-up ran %d times, want 3", n)
	}
	if _, err := testbackend.Call(context.Background(), directConn(t, b.s.Instance().Addr)); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownEndsWarmup: Shutdown during a warm-up ends its context, and
// Serve returns ErrServerClosed without registering.
func TestShutdownEndsWarmup(t *testing.T) {
	e := newEnv(t)
	entered := make(chan struct{})
	b := e.launchOn(t, "a", nil, server.WithWarmup(func(ctx context.Context) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}))
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown during the warm-up: %v", err)
	}
	if err := <-b.err; !errors.Is(err, server.ErrServerClosed) {
		t.Fatalf("Serve after Shutdown during the warm-up = %v, want ErrServerClosed", err)
	}
	b.err <- server.ErrServerClosed
}

func TestWarmupOptionsValidated(t *testing.T) {
	e := newEnv(t)
	reg := e.start(t, "ok").reg
	for name, opt := range map[string]server.Option{
		"nil warm-up":      server.WithWarmup(nil),
		"zero attempts":    server.WithWarmupRetry(0, time.Second),
		"negative backoff": server.WithWarmupRetry(2, -time.Second),
	} {
		if _, err := server.New(reg, registry.Instance{Name: "greeter"}, opt); err == nil || !strings.HasPrefix(err.Error(), "server: WithWarmup") {
			t.Errorf("New with %s = %v, want an error naming the option", name, err)
		}
	}
}
