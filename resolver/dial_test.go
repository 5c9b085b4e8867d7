package resolver_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

var plainText = grpc.WithTransportCredentials(insecure.NewCredentials())

// openStore opens a Store on a new embedded etcd, closed at cleanup.
func openStore(t *testing.T) *etcd.Store {
	t.Helper()
	c := etcdtest.Start(t)
	store, err := etcd.Open(etcd.ClientConfig(c.Endpoints()[0]), etcdopts.Fast()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// serveIn starts a backend and registers it in store as greeter instance
// id with the metadata given.
func serveIn(t *testing.T, store registry.Store, id string, metadata map[string]string) *testbackend.Backend {
	t.Helper()
	be := testbackend.Start(t)
	registrytest.RegisterEventually(t, store.Registrar().(registrytest.PendingRegistrar), registry.Instance{Name: "greeter", ID: id, Addr: be.Addr, Metadata: metadata})
	return be
}

// dialStore opens a channel with Dial, closed at cleanup.
func dialStore(t *testing.T, store registry.Store, target string) *grpc.ClientConn {
	t.Helper()
	conn, err := resolver.Dial(store, target, plainText)
	if err != nil {
		t.Fatalf("Dial(%q): %v", target, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// A channel from Dial, given no balancer, spreads calls over every
// instance (gRPC's own default, pick_first, would send them all to one).
func TestDialBalancesByDefault(t *testing.T) {
	store := openStore(t)
	a, b, c := serveIn(t, store, "a", nil), serveIn(t, store, "b", nil), serveIn(t, store, "c", nil)
	conn := dialStore(t, store, "greeter")
	got := callUntil(t, conn, "calls on all three instances", hasAll(a.Addr, b.Addr, c.Addr))
	t.Logf("calls by instance: %v", got)
}

// A channel from Dial follows the store's canary: with none, the
// uncolored calls stay on the base; a canary of 100 % sends them to its
// color.
func TestDialFollowsTheStoresCanary(t *testing.T) {
	store := openStore(t)
	base := serveIn(t, store, "base", nil)
	blue := serveIn(t, store, "blue", map[string]string{"color": "blue"})
	conn := dialStore(t, store, "greeter")
	callUntil(t, conn, "a call on the base", hasAll(base.Addr))
	if got := calls(t, conn, 50); got[blue.Addr] != 0 {
		t.Fatalf("without a canary, %d of 50 uncolored calls went to the blue instance, want 0", got[blue.Addr])
	}
	admin := store.Admin(registry.Actor{Who: "test"})
	if err := admin.SetCanary(ctxFor(t, 5*time.Second), "greeter", registry.Canary{Color: "blue", Percent: 100}); err != nil {
		t.Fatal(err)
	}
	callUntil(t, conn, "uncolored calls on the blue instance under a canary of 100%", func(got map[string]int) bool {
		return got[blue.Addr] > 0
	})
	if got := calls(t, conn, 50); got[blue.Addr] != 50 {
		t.Fatalf("under a canary of 100%%, %d of 50 uncolored calls went to the blue instance, want all", got[blue.Addr])
	}
}

// A channel from Dial follows the store's call policy: under
// maxConcurrent 1, a second call while one is in flight fails at once
// with Unavailable naming the limit.
func TestDialFollowsTheStoresPolicy(t *testing.T) {
	store := openStore(t)
	be := serveIn(t, store, "a", nil)
	be.SetDelay(15 * time.Second) // the first call holds its place until the test ends
	admin := store.Admin(registry.Actor{Who: "test"})
	if err := admin.SetPolicy(ctxFor(t, 5*time.Second), "greeter", registry.Policy{MaxConcurrent: 1}); err != nil {
		t.Fatal(err)
	}
	conn := dialStore(t, store, "greeter")
	var wg sync.WaitGroup
	defer wg.Wait()
	first, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = testbackend.Call(first, conn, grpc.WaitForReady(true))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for be.Calls() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first call did not reach the backend within 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling the backend's count
	}
	// The channel's first state waits at most the first-state timeout
	// (500ms) for the policy; on a loaded machine the policy may come in a
	// later state. A second call made before it waits at the backend until
	// its own deadline; once the policy is in, one fails at once.
	deadline = time.Now().Add(10 * time.Second)
	for {
		begun := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := testbackend.Call(ctx, conn)
		cancel()
		took := time.Since(begun)
		switch {
		case status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "maxConcurrent"):
			if took > 500*time.Millisecond {
				t.Fatalf("the call over the limit failed after %v, want at once (the first call holds its place)", took)
			}
			return
		case status.Code(err) != codes.DeadlineExceeded:
			t.Fatalf("a second call in flight under maxConcurrent 1: %v, want Unavailable naming maxConcurrent", err)
		case time.Now().After(deadline):
			t.Fatalf("calls over maxConcurrent 1 still waited at the backend after 10s (%v), want them refused", err)
		}
	}
}

// Dial chooses no transport credentials: without the caller's it fails,
// naming the option, rather than dialing in plain text.
func TestDialRequiresTransportCredentials(t *testing.T) {
	store := openStore(t)
	conn, err := resolver.Dial(store, "greeter")
	if err == nil {
		_ = conn.Close()
		t.Fatal("Dial without transport credentials succeeded, want an error")
	}
	if !strings.Contains(err.Error(), "no transport security set") || !strings.Contains(err.Error(), "WithTransportCredentials") {
		t.Fatalf("Dial without transport credentials: %v, want gRPC's error naming WithTransportCredentials", err)
	}
	t.Logf("Dial without credentials: %v", err)
}

// Dial refuses a target that does not parse at once (not at the first
// call), a URL instead of a service, and a nil store; Builder.Dial
// resolves its own scheme and refuses a Builder's invalid option.
func TestDialRefusesBadTargets(t *testing.T) {
	store := openStore(t)
	for _, target := range []string{"muster:///greeter", "Bad Name", "greeter?colour=blue", "", "greeter?zone="} {
		conn, err := resolver.Dial(store, target, plainText)
		if !errors.Is(err, resolver.ErrBadTarget) {
			if conn != nil {
				_ = conn.Close()
			}
			t.Errorf("Dial(%q) = %v, want an error matching ErrBadTarget", target, err)
		}
	}
	if _, err := resolver.Dial(nil, "greeter", plainText); err == nil || !strings.Contains(err.Error(), "nil store") {
		t.Errorf("Dial(nil store) = %v, want an error naming the nil store", err)
	}

	b, err := resolver.New(store.Discovery(), resolver.WithScheme("svc"), resolver.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	be := serveIn(t, store, "a", nil)
	conn, err := b.Dial("greeter", plainText)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.Target() != "svc:///greeter" {
		t.Fatalf("Builder.Dial's channel has target %q, want svc:///greeter", conn.Target())
	}
	ctx := ctxFor(t, 10*time.Second)
	if addr, err := testbackend.Call(ctx, conn, grpc.WaitForReady(true)); err != nil || addr != be.Addr {
		t.Fatalf("a call through Builder.Dial: %s, %v; want served by %s", addr, err, be.Addr)
	}
	bad := resolver.NewBuilder(store.Discovery(), resolver.WithSubset(-1), resolver.WithLogger(quiet))
	if _, err := bad.Dial("greeter", plainText); err == nil || !strings.Contains(err.Error(), "WithSubset(-1)") {
		t.Fatalf("Dial of a Builder with an invalid option = %v, want its error", err)
	}
}
