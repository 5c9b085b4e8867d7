package main

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// The canary command's settings reach a live client: 100 % moves the
// uncolored calls to blue, off moves them back.
func TestCanaryCommand(t *testing.T) {
	s := startServe(t, t.TempDir())
	r := newRegistrar(t, s.endpoint)
	base, blue := testbackend.Start(t), testbackend.Start(t)
	register(t, r, registry.Instance{Name: "user", ID: "base", Addr: base.Addr})
	register(t, r, registry.Instance{Name: "user", ID: "blue", Addr: blue.Addr, Metadata: map[string]string{"color": "blue"}})

	cli := newClient(t, s.endpoint)
	canaries, err := etcd.NewCanaries(cli, etcd.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	conn := dialLive(t, cli, "muster:///user", resolver.WithCanaries(canaries))
	testbackend.CallUntil(t, conn, waitTimeout, "uncolored calls on the base", testbackend.HasAll(base.Addr))

	ep := []string{"--endpoints", s.endpoint}
	if got := runOK(t, append([]string{"canary", "user"}, ep...)...); !strings.Contains(got.stdout, "user: no canary") {
		t.Fatalf("canary user (none set):\n%s", got.stdout)
	}
	if got := runOK(t, append([]string{"canary", "user", "blue", "100"}, ep...)...); !strings.Contains(got.stdout, "user: 100% of uncolored calls to blue") {
		t.Fatalf("canary user blue 100:\n%s", got.stdout)
	}
	testbackend.CallUntil(t, conn, waitTimeout, "uncolored calls on blue after canary 100", testbackend.HasAll(blue.Addr))
	if got := runOK(t, append([]string{"canary", "user"}, ep...)...); !strings.Contains(got.stdout, "user: 100% of uncolored calls to blue") {
		t.Fatalf("canary user (100%% set):\n%s", got.stdout)
	}
	runOK(t, append([]string{"canary", "user", "off"}, ep...)...)
	// Off: once a call lands on the base again, 200 more stay there.
	base.ResetCalls()
	testbackend.CallUntil(t, conn, waitTimeout, "uncolored calls on the base after canary off", testbackend.HasAll(base.Addr))
	blue.ResetCalls()
	testbackend.Calls(t, conn, 200)
	if blue.Calls() != 0 {
		t.Fatalf("blue took %d of 200 uncolored calls after canary off", blue.Calls())
	}
}

func TestCanaryUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"canary"},
		{"canary", "User"},
		{"canary", "user", "blue"},
		{"canary", "user", "blue", "x"},
		{"canary", "user", "blue", "101"},
		{"canary", "user", "blue", "-1"},
		{"canary", "user", "", "5"},
		{"canary", "user", "blue", "5", "6"},
	} {
		if r := run(args...); r.code != 2 {
			t.Errorf("muster %v: exit %d, want 2; stderr %q", args, r.code, r.stderr)
		}
	}
}

// dialLive returns a channel to target through a Discovery over cli and
// the Muster resolver (with opts), balanced by muster_p2c, as a service
// would have; both are closed at cleanup.
func dialLive(t *testing.T, cli *clientv3.Client, target string, opts ...resolver.Option) *grpc.ClientConn {
	t.Helper()
	disc, err := etcd.NewDiscovery(cli, etcd.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disc.Close() })
	conn, err := grpc.NewClient(target, grpc.WithResolvers(resolver.NewBuilder(disc, append([]resolver.Option{resolver.WithLogger(quietLog)}, opts...)...)),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"muster_p2c":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
