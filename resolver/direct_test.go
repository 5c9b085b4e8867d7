package resolver_test

import (
	"errors"
	"net"
	"net/url"
	"testing"

	"google.golang.org/grpc"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/resolver"
)

func TestDirectTargetReachesEveryAddress(t *testing.T) {
	a, b := testbackend.Start(t), testbackend.Start(t)
	conn := dial(t, grpc.WithResolvers(resolver.NewDirectBuilder()), "direct:///"+a.Addr+","+b.Addr)
	callUntil(t, conn, "both servers called", hasAll(a.Addr, b.Addr))
}

func TestDirectTargetIPv6(t *testing.T) {
	lis, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback on this machine: %v", err)
	}
	lis.Close()
	be := testbackend.StartOn(t, "[::1]:0")
	conn := dial(t, grpc.WithResolvers(resolver.NewDirectBuilder()), "direct:///"+be.Addr)
	if got := calls(t, conn, 3); got[be.Addr] != 3 {
		t.Fatalf("calls to %s: %v", be.Addr, got)
	}
}

func TestDirectTargetErrors(t *testing.T) {
	for _, target := range []string{
		"direct:///",
		"direct://10.0.0.1:80",
		"direct:///10.0.0.1",
		"direct:///10.0.0.1:0",
		"direct:///:80",
		"direct:///10.0.0.1:80,10.0.0.1:80",
		"direct:///10.0.0.1:80,",
		"direct:///::1:80",
	} {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		_, err = resolver.NewDirectBuilder().Build(grpcresolver.Target{URL: *u}, nil, grpcresolver.BuildOptions{})
		if !errors.Is(err, resolver.ErrBadTarget) {
			t.Errorf("Build(%s) = %v, want ErrBadTarget", target, err)
		} else {
			t.Logf("%s: %v", target, err)
		}
	}
}
