package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/server"
)

// A rolling restart, one replacement registered before each old server
// stops through Shutdown, fails none of the unary calls of two clients
// that keep calling, neither waiting for ready nor retrying: a channel
// following the muster resolver, and a listClient, which reads the
// service's list at most every 100 ms and calls each address on a
// connection of its own.
//
// The channel alone would not prove Shutdown's order: on a graceful stop
// gRPC's GOAWAY makes it move a call not yet started to another
// connection, which hides a missing deregistration or drain delay. The
// listClient has nothing of the kind: a call it picks for a server that
// has stopped accepting fails. It loses no call only because each old
// server leaves the registry before it stops, and keeps serving for its
// drain delay (1 s here), longer than the client takes to see that.
// Without the deregistration, or without the delay, its calls fail
// (docs/MUTATION.md); the TestShutdown* tests carry each step alone.
func TestRollingRestartLosesNoCall(t *testing.T) {
	e := newEnv(t)
	const drain = time.Second
	bs := []*backend{
		e.start(t, "g0", server.WithDrainDelay(drain)),
		e.start(t, "g1", server.WithDrainDelay(drain)),
		e.start(t, "g2", server.WithDrainDelay(drain)),
	}
	clients := []struct {
		name string
		load *testbackend.Load
	}{
		{"the resolver's channel", startLoad(t, dial(t, e, "muster:///greeter"), 4)},
		{"the list client", startLoad(t, newListClient(t, e, 100*time.Millisecond), 2)},
	}
	waitFor := func(b *backend) {
		t.Helper()
		for _, c := range clients {
			c.load.WaitFor(t, b.s.Instance().Addr)
		}
	}
	for _, b := range bs {
		waitFor(b)
	}
	for i, old := range bs {
		waitFor(e.start(t, fmt.Sprintf("g%d-new", i)))
		old.stop(t)
	}
	for _, c := range clients {
		total, failures := c.load.Finish()
		t.Logf("rolling restart of 3 backends, %s: %d calls, %d failed", c.name, total, len(failures))
		if len(failures) > 0 {
			t.Errorf("%s: %d of %d calls failed during the rolling restart; first: %v", c.name, len(failures), total, failures[0])
		}
	}
}

// startLoad starts a load of workers calling through conn, finished at
// the end of the test if the test has not finished it.
func startLoad(t *testing.T, conn grpc.ClientConnInterface, workers int) *testbackend.Load {
	l := testbackend.StartLoad(conn, workers)
	t.Cleanup(func() { l.Finish() })
	return l
}

// listClient is a client that knows a service only by the list it reads
// from the registry, at most every refresh (a client polling a list, a
// proxy fed by one), and calls its addresses in turn, each on a
// connection of its own. Nothing of gRPC's connection management spans
// the addresses: a call picked for a server that no longer accepts fails
// at once (connection refused, fail fast), where a channel following the
// muster resolver moves it to another connection. Unary calls only.
type listClient struct {
	w       registry.Watcher
	refresh time.Duration

	mu    sync.Mutex
	read  time.Time
	addrs []string
	next  int
	conns map[string]*grpc.ClientConn
}

// newListClient returns a listClient of greeter through e's Discovery,
// its connections closed at the end of the test.
func newListClient(t *testing.T, e *env, refresh time.Duration) *listClient {
	t.Helper()
	c := &listClient{w: watchGreeter(t, e), refresh: refresh, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, conn := range c.conns {
			_ = conn.Close()
		}
	})
	return c
}

// pick returns the connection to the next address of the list, read
// again first if it was read refresh ago or more.
func (c *listClient) pick() (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.read) >= c.refresh {
		c.read = now
		c.addrs = c.addrs[:0]
		for _, in := range c.w.Snapshot().Instances {
			c.addrs = append(c.addrs, in.Addr)
		}
	}
	if len(c.addrs) == 0 {
		return nil, status.Error(codes.Unavailable, "list client: no instance listed")
	}
	addr := c.addrs[c.next%len(c.addrs)]
	c.next++
	conn := c.conns[addr]
	if conn == nil {
		var err error
		if conn, err = grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return nil, err
		}
		c.conns[addr] = conn
	}
	return conn, nil
}

// Invoke makes a unary call on the connection to the next address.
func (c *listClient) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	conn, err := c.pick()
	if err != nil {
		return err
	}
	return conn.Invoke(ctx, method, args, reply, opts...)
}

// NewStream refuses: the list client makes unary calls only.
func (c *listClient) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "list client: unary calls only")
}

func TestCrashedServerLeavesWithinTTL(t *testing.T) {
	e := newEnv(t)
	keep := e.start(t, "keep")
	cmd, childAddr := startChild(t, childEnv, e.c.Endpoints()[0])

	conn := dial(t, e, "muster:///greeter")
	const workers = 4
	l := testbackend.StartLoad(conn, workers)
	l.WaitFor(t, childAddr)
	l.WaitFor(t, keep.s.Instance().Addr)

	key := registry.Key(registry.DefaultPrefix, "greeter", "child")
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := e.cli.Watch(wctx, key, clientv3.WithCreatedNotify())
	<-wch
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var gone time.Duration
	for gone == 0 {
		select {
		case resp := <-wch:
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					gone = time.Since(killed)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the crashed server's key was not deleted within 10s")
		}
	}
	total, failures := l.Finish()
	t.Logf("key gone %v after SIGKILL; %d calls, %d failed", gone.Round(time.Millisecond), total, len(failures))
	if limit := 2*time.Second + time.Second; gone > limit {
		t.Fatalf("key deleted %v after the kill, want within TTL + 1s = %v", gone, limit)
	}
	if len(failures) > workers {
		t.Fatalf("%d calls failed, more than the %d that can be in flight at the kill: %v", len(failures), workers, failures)
	}
}

func TestServerStartedWhileEtcdIsDown(t *testing.T) {
	e := newEnv(t)
	m := e.c.Members()[0]
	m.Stop(t)
	// Written by Serve before Ready and by the wait for the registration,
	// which Shutdown waits for: read after Shutdown.
	logs := &bytes.Buffer{}
	b := e.start(t, "a", server.WithRegisterTimeout(300*time.Millisecond), server.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	addr := b.s.Instance().Addr

	direct, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := testbackend.Call(ctx, direct); err != nil {
		t.Fatalf("direct call to a server started with etcd down: %v", err)
	}

	m.Restart(t)
	conn := dial(t, e, "muster:///greeter")
	got, err := testbackend.Call(ctx, conn, grpc.WaitForReady(true))
	if err != nil || got != addr {
		t.Fatalf("call through discovery after etcd came back = %q, %v; want %s", got, err, addr)
	}
	if err := b.s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The way back is logged once, after the pending line.
	text := logs.String()
	pending, back := strings.Index(text, "registration pending"), strings.Index(text, "registered; the registry answered")
	if pending < 0 || back < pending || strings.Count(text, "registered; the registry answered") != 1 {
		t.Fatalf("want one line of the registration after the pending one:\n%s", text)
	}
}

func TestStreamEndsWithRetryableStatusOnShutdownAndReopens(t *testing.T) {
	e := newEnv(t)
	a, b := e.start(t, "a"), e.start(t, "b")
	conn := dial(t, e, "muster:///greeter")
	health := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Open streams until one lands on a.
	var stream healthpb.Health_WatchClient
	for stream == nil {
		s, err := health.Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		if p, ok := peer.FromContext(s.Context()); ok && p.Addr.String() == a.s.Instance().Addr {
			stream = s
		}
	}
	shut := make(chan error, 1)
	go func() { shut <- a.s.Shutdown(ctx) }()

	var end error
	for end == nil {
		_, end = stream.Recv() // NOT_SERVING updates first, then the end
	}
	st, _ := status.FromError(end)
	if st.Code() != codes.Unavailable || st.Message() != server.DrainMessage {
		t.Fatalf("stream on a draining server ended with %v, want Unavailable %q", end, server.DrainMessage)
	}

	// The client pattern: on Unavailable, reopen through the same channel.
	reopened, err := health.Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := reopened.Recv()
	if err != nil {
		t.Fatalf("reopened stream: %v", err)
	}
	p, _ := peer.FromContext(reopened.Context())
	if p == nil || p.Addr.String() != b.s.Instance().Addr || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("reopened stream on %v with status %v, want %s SERVING", p, resp.Status, b.s.Instance().Addr)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestLifecycleErrors(t *testing.T) {
	e := newEnv(t)
	b := e.start(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-b.err; !errors.Is(err, server.ErrServerClosed) {
		t.Fatalf("Serve after Shutdown = %v, want ErrServerClosed", err)
	}
	b.err <- server.ErrServerClosed // for the cleanup's check
	if err := b.s.Shutdown(ctx); !errors.Is(err, server.ErrServerClosed) {
		t.Fatalf("second Shutdown = %v, want ErrServerClosed", err)
	}
	if err := b.s.ListenAndServe("127.0.0.1:0"); !errors.Is(err, server.ErrServerClosed) {
		t.Fatalf("Serve after Shutdown = %v, want ErrServerClosed", err)
	}
	if _, err := server.New(b.reg, registry.Instance{Name: "Bad Name"}); !errors.Is(err, registry.ErrInvalidInstance) {
		t.Fatalf("New with a bad name = %v, want ErrInvalidInstance", err)
	}
	if _, err := server.New(nil, registry.Instance{Name: "ok"}); err == nil {
		t.Fatalf("New with a nil registrar succeeded")
	}
}
