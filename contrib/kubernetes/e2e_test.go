package kubernetes_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/kubernetes/fake"

	_ "github.com/musterhq/muster/balancer/p2c" // muster_p2c
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/resolver"
)

// A gRPC channel on "muster:///greeter.default" reaches real backends
// listed in EndpointSlices (one slice per backend, since each listens on
// its own port) and follows a pod terminating: the terminating backend
// gets no new calls, then leaves; a new pod gets calls.
func TestChannelFollowsSlices(t *testing.T) {
	backends := []*testbackend.Backend{testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)}
	c := fake.NewClientset()
	podSlice := func(i int, st cond) {
		host, port, err := net.SplitHostPort(backends[i].Addr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		pod := "pod-" + strconv.Itoa(i)
		apply(t, c, slice("greeter-"+pod, "greeter", int32(p), ep(host, pod, "z1", st)))
	}
	podSlice(0, isReady)
	podSlice(1, isReady)
	d := newDiscovery(t, c)
	conn, err := grpc.NewClient("muster:///greeter.default",
		grpc.WithResolvers(resolver.NewBuilder(d)),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_p2c":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	within := 20 * time.Second
	testbackend.CallUntil(t, conn, within, "both pods called", testbackend.HasAll(backends[0].Addr, backends[1].Addr))

	podSlice(2, isReady)
	testbackend.CallUntil(t, conn, within, "the new pod called", testbackend.HasAll(backends[2].Addr))

	podSlice(0, isTerminating)
	noCallsTo(t, conn, backends[0], within)
	podSlice(0, isGone)
	podSlice(2, isTerminating)
	noCallsTo(t, conn, backends[2], within)
	if n := backends[0].Calls(); n != 0 {
		t.Fatalf("the terminated pod got %d calls", n)
	}
}

// noCallsTo waits until the channel has stopped sending calls to b (a
// round of calls reaches the others only), then checks that many more
// calls do not reach it either.
func noCallsTo(t *testing.T, conn *grpc.ClientConn, b *testbackend.Backend, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b.ResetCalls()
		testbackend.Calls(t, conn, 50)
		if b.Calls() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still called after %v", b.Addr, within)
		}
	}
	testbackend.Calls(t, conn, 200)
	if n := b.Calls(); n != 0 {
		t.Fatalf("%s got %d of 200 calls after it stopped getting any", b.Addr, n)
	}
}
