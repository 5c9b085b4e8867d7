package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
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
// stops through Shutdown, fails none of the calls of a client that keeps
// calling. What this proves is the end to end: no call lost across three
// replacements. It does not prove the order inside Shutdown (NOT_SERVING,
// deregister, drain delay, stop): gRPC's GOAWAY on a graceful stop makes
// the client retry a call not yet started on another connection, which
// would hide a missing deregistration or drain delay here. The
// TestShutdown* tests carry that order.
func TestRollingRestartLosesNoCall(t *testing.T) {
	e := newEnv(t)
	bs := []*backend{e.start(t, "g0"), e.start(t, "g1"), e.start(t, "g2")}
	conn := dial(t, e, "muster:///greeter")
	l := testbackend.StartLoad(conn, 4)
	for _, b := range bs {
		l.WaitFor(t, b.s.Instance().Addr)
	}
	for i, old := range bs {
		replacement := e.start(t, fmt.Sprintf("g%d-new", i))
		l.WaitFor(t, replacement.s.Instance().Addr)
		old.stop(t)
	}
	total, failures := l.Finish()
	t.Logf("rolling restart of 3 backends: %d calls, %d failed", total, len(failures))
	if len(failures) > 0 {
		t.Fatalf("%d of %d calls failed during the rolling restart; first: %v", len(failures), total, failures[0])
	}
}

func TestCrashedServerLeavesWithinTTL(t *testing.T) {
	e := newEnv(t)
	keep := e.start(t, "keep")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+e.c.Endpoints()[0])
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var childAddr string
	select {
	case childAddr = <-lines:
	case <-time.After(20 * time.Second):
		t.Fatalf("child server did not start within 20s")
	}

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
