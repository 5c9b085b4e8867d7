package main

import (
	"context"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry/etcd"
)

func TestRegisterSidecarFollowsHealth(t *testing.T) {
	s := startServe(t, t.TempDir())
	be := testbackend.Start(t)
	disc, err := etcd.NewDiscovery(newClient(t, s.endpoint), etcd.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer disc.Close()
	w, err := disc.Watch(context.Background(), "legacy")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	side := start(t, "register", "--endpoints", s.endpoint, "--name", "legacy", "--addr", be.Addr,
		"--zone", "z1", "--meta", "team=core", "--check", "grpc://"+be.Addr,
		"--interval", "100ms", "--failures", "2", "--ttl", "2s")
	in := registrytest.WaitFor(t, w, "the sidecar's instance", registrytest.HasIDs(be.Addr)).Instances[0]
	if in.Zone != "z1" || in.Metadata["team"] != "core" {
		t.Fatalf("registered as %+v", in)
	}
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	registrytest.WaitFor(t, w, "the instance gone while NOT_SERVING", registrytest.HasIDs())
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	registrytest.WaitFor(t, w, "the instance back when SERVING", registrytest.HasIDs(be.Addr))

	if code := side.stop(t); code != 0 {
		t.Fatalf("sidecar exited %d on SIGTERM; stderr:\n%s", code, side.stderr)
	}
	start := time.Now()
	registrytest.WaitFor(t, w, "the instance gone on exit", registrytest.HasIDs())
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the instance left %v after the sidecar stopped; want at once (lease revoked), not at TTL", took)
	}
}

func TestRegisterUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"register", "--addr", "h:1"},
		{"register", "--name", "x"},
		{"register", "--name", "x", "--addr", "h"},
		{"register", "--name", "x", "--addr", "h:1", "--meta", "novalue"},
		{"register", "--name", "x", "--addr", "h:1", "--check", "ftp://h:1"},
		{"register", "--name", "x", "--addr", "h:1", "--ttl", "100ms"},
		{"register", "--name", "x", "--addr", "h:1", "--weight", "20000"},
	} {
		if r := run(args...); r.code != 2 {
			t.Errorf("muster %v: exit %d, want 2; stderr %q", args, r.code, r.stderr)
		}
	}
}
