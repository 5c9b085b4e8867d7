package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/examples/user/userpb"
	"github.com/musterhq/muster/examples/user/usersvc"
	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.LeakOptions()...) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startUser runs one user instance the way examples/user/server does.
func startUser(t *testing.T, c *etcdtest.Cluster) string {
	t.Helper()
	reg, err := etcd.NewRegistrar(c.Client(t), etcd.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(reg, registry.Instance{Name: "user"}, server.WithLogger(quiet), server.WithDrainDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	userpb.RegisterUserServer(s.GRPC(), &usersvc.Service{Addr: func() string { return s.Instance().Addr }})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	<-s.Ready()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-done
		_ = reg.Close()
	})
	return s.Instance().Addr
}

func freeAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// startGateway runs the gateway on a free port until the test ends and
// returns its address.
func startGateway(t *testing.T, c *etcdtest.Cluster) string {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, quiet, c.Endpoints(), addr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway run: %v", err)
		}
	})
	return addr
}

// getUser2 asks the gateway for user 2 and returns the instance that
// answered; ok is false while the gateway does not accept connections yet.
func getUser2(t *testing.T, addr string) (servedBy string, ok bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/users/2")
	if err != nil {
		return "", false
	}
	var body map[string]string
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("GET /users/2: %d %v", resp.StatusCode, err)
	}
	if body["name"] != "Grace Hopper" {
		t.Fatalf("GET /users/2 = %v", body)
	}
	return body["served_by"], true
}

// reachBoth calls the gateway until both instances a and b have answered.
func reachBoth(t *testing.T, addr, a, b string) {
	t.Helper()
	served := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for served[a] == 0 || served[b] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s the gateway reached %v, want both %s and %s", served, a, b)
		}
		by, ok := getUser2(t, addr)
		if !ok {
			time.Sleep(20 * time.Millisecond) // the gateway is still starting
			continue
		}
		served[by]++
	}
}

func TestGatewayReachesEveryInstance(t *testing.T) {
	c := etcdtest.Start(t)
	a, b := startUser(t, c), startUser(t, c)
	addr := startGateway(t, c)

	reachBoth(t, addr, a, b)
	resp, err := http.Get("http://" + addr + "/users/99")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /users/99 = %d, want 404", resp.StatusCode)
	}
}

// TestDrainedInstanceGetsNoCalls: what `muster drain` does (an override
// with weight 0) takes an instance out of the gateway's traffic, which a
// weight-blind balancer such as round_robin would not.
func TestDrainedInstanceGetsNoCalls(t *testing.T) {
	c := etcdtest.Start(t)
	a, b := startUser(t, c), startUser(t, c)
	addr := startGateway(t, c)

	reachBoth(t, addr, a, b)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	zero := 0
	if err := etcd.SetOverride(ctx, c.Client(t), "user", a, registry.Override{Weight: &zero}); err != nil {
		t.Fatal(err)
	}
	// The drain reaches the gateway in milliseconds; then 50 calls in a
	// row all go to b.
	const want = 50
	run := 0
	for run < want {
		if ctx.Err() != nil {
			t.Fatalf("10s after draining %s, only %d calls in a row went to %s, want %d", a, run, b, want)
		}
		by, _ := getUser2(t, addr)
		if by == b {
			run++
		} else {
			run = 0
		}
	}
}
