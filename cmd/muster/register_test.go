package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

func TestRegisterSidecarFollowsHealth(t *testing.T) {
	s := startServe(t, t.TempDir())
	be := testbackend.Start(t)
	w := watchLegacy(t, s.endpoint)

	side := startReading(t, true, "register", "--endpoints", s.endpoint, "--name", "legacy", "--addr", be.Addr,
		"--zone", "z1", "--region", "r1", "--meta", "team=core", "--check", "grpc://"+be.Addr,
		"--interval", "100ms", "--failures", "2", "--ttl", "2s")
	in := registrytest.WaitFor(t, w, "the sidecar's instance", registrytest.HasIDs(be.Addr)).Instances[0]
	if in.Zone != "z1" || in.Region != "r1" || in.Metadata["team"] != "core" {
		t.Fatalf("registered as %+v", in)
	}
	// The stored value has the region after the zone.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := newClient(t, s.endpoint).Get(ctx, registry.Key(registry.DefaultPrefix, "legacy", be.Addr))
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), `"zone":"z1","region":"r1"`) {
		t.Fatalf("registry value of the sidecar's instance: %v, %v; want zone z1 and region r1", resp, err)
	}
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	registrytest.WaitFor(t, w, "the instance drained while NOT_SERVING", draining(be.Addr, true))
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	registrytest.WaitFor(t, w, "the instance undrained when SERVING", draining(be.Addr, false))

	// An operator's drain outlives the sidecar's undrain.
	zero := 0
	if err := etcd.SetOverride(ctx, newClient(t, s.endpoint), "legacy", be.Addr, registry.Override{Weight: &zero}); err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "the instance drained by the operator", draining(be.Addr, true))
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	awaitLine(t, side, `msg="drained \(weight 0: no new calls\): 2 health checks failed in a row"`)
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	awaitLine(t, side, `msg="undrained: the health check passes again"`)
	// Once a later write reaches the watcher, so has the undrain.
	later := registry.Instance{Name: "legacy", ID: "later", Addr: "127.0.0.1:9"}
	register(t, newRegistrar(t, s.endpoint), later)
	snap := registrytest.WaitFor(t, w, "a later instance", registrytest.HasIDs(be.Addr, "later"))
	if !draining(be.Addr, true)(snap) {
		t.Fatalf("the sidecar's undrain undid the operator's drain: %s", registrytest.Describe(snap))
	}

	if code := side.stop(t); code != 0 {
		t.Fatalf("sidecar exited %d on SIGTERM; stderr:\n%s", code, side.stderr)
	}
	start := time.Now()
	registrytest.WaitFor(t, w, "the instance gone on exit", registrytest.HasIDs("later"))
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
		{"register", "--name", "x", "--addr", "h:1", "--warmup", "1s"},
		{"register", "--name", "x", "--addr", "h:1", "--check", "tcp://h:1", "--warmup", "-1s"},
		{"register", "--name", "x", "--addr", "h:1", "--region", strings.Repeat("r", registry.MaxRegionLen+1)},
		{"register", "--name", "x", "--addr", "h:1", "--metrics-listen", "no-port"},
	} {
		if r := run(args...); r.code != 2 {
			t.Errorf("muster %v: exit %d, want 2; stderr %q", args, r.code, r.stderr)
		}
	}
}

// While etcd does not answer, register says so at once and then every
// registerWarnEvery; it says "registered" only once etcd has the
// instance, and on exit deregisters only what was registered.
func TestRegisterWarnsWhileEtcdIsUnreachable(t *testing.T) {
	urls := freeLoopbackURLs(t, 2)
	side := startReading(t, true, "register", "--endpoints", urls[0], "--timeout", "1s",
		"--name", "legacy", "--addr", "127.0.0.1:9", "--id", "one")
	warning := `time=\S+ level=WARN msg="not registered yet: etcd at ` + regexp.QuoteMeta(urls[0]) +
		` does not answer; retrying until it does \(this repeats every 5s\)" service=legacy id=one addr=127.0.0.1:9 error=.*connection refused.*`
	side.expect(t, warning)
	start := time.Now()
	side.expect(t, warning)
	if took := time.Since(start); took < registerWarnEvery*9/10 || took > 2*registerWarnEvery {
		t.Fatalf("the second warning came %v after the first; want about %v", took, registerWarnEvery)
	}
	if code := side.stop(t); code != 0 {
		t.Fatalf("register exited %d; stderr:\n%s", code, side.stderr)
	}
	if last := side.seen[len(side.seen)-1]; !strings.Contains(last, "exiting; the instance was never registered") {
		t.Fatalf("register's last line on exit is %q; want it to say nothing was registered", last)
	}
	if log := side.stderr.String(); strings.Contains(log, "msg=registered") || strings.Contains(log, "deregistered") || strings.Contains(log, "pending") || strings.Contains(log, "retry_in") {
		t.Fatalf("register's log claims a registration, or has unexplained fields:\n%s", log)
	}

	// When etcd comes up, the registration happens and is said.
	side = startReading(t, true, "register", "--endpoints", urls[0], "--timeout", "1s",
		"--name", "legacy", "--addr", "127.0.0.1:9", "--id", "one", "--weight", "0")
	side.expect(t, warning)
	s, err := tryServe(t, serveOptions{dataDir: t.TempDir(), clientURL: urls[0], peerURL: urls[1], name: "test"})
	if err != nil {
		t.Fatalf("serve on %s: %v", urls[0], err)
	}
	for {
		line := side.next(t, "the registered line")
		if strings.Contains(line, `msg="registered drained (weight 0: no new calls)" service=legacy id=one`) {
			break
		}
		if !regexp.MustCompile(warning).MatchString(line) {
			t.Fatalf("unexpected line before registered: %q", line)
		}
	}
	if got := runOK(t, "get", "legacy", "one", "--endpoints", s.endpoint, "-o", "json"); !strings.Contains(got.stdout, `"weight": 0`) {
		t.Fatalf("register --weight 0 registered:\n%s", got.stdout)
	}
	if code := side.stop(t); code != 0 {
		t.Fatalf("register exited %d; stderr:\n%s", code, side.stderr)
	}
	if last := side.seen[len(side.seen)-1]; !strings.Contains(last, `msg="deregistered on exit"`) {
		t.Fatalf("register's last line on exit is %q; want deregistered", last)
	}
	if r := run("get", "legacy", "one", "--endpoints", s.endpoint); r.code != 1 {
		t.Fatalf("get after register exited: exit %d, want 1 (gone)", r.code)
	}
}

// draining returns a WaitFor condition: instance id is registered and
// draining is want.
func draining(id string, want bool) func(registry.Snapshot) bool {
	return func(s registry.Snapshot) bool {
		for _, in := range s.Instances {
			if in.ID == id {
				return in.Draining == want
			}
		}
		return false
	}
}

// awaitLine reads b's lines until one matches re (unanchored), failing
// the test if none does within waitTimeout: a process that keeps logging
// something else does not hold it longer.
func awaitLine(t *testing.T, b *background, re string) string {
	t.Helper()
	r := regexp.MustCompile(re)
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		if line := b.nextBefore(t, fmt.Sprintf("a line matching %q", re), timer.C); r.MatchString(line) {
			return line
		}
	}
}

// TestRegisterWarmup: with --warmup the instance is registered only once
// its health check has passed continuously for that long; a failed check
// starts the count again. The same holds for undraining after failed
// checks. Without the warm-up the first passing check registers it.
func TestRegisterWarmup(t *testing.T) {
	const warmup = 1500 * time.Millisecond
	s := startServe(t, t.TempDir())
	be := testbackend.Start(t)
	w := watchLegacy(t, s.endpoint)

	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	side := startReading(t, true, "register", "--endpoints", s.endpoint, "--name", "legacy", "--addr", be.Addr,
		"--check", "grpc://"+be.Addr, "--interval", "50ms", "--failures", "2", "--warmup", warmup.String())
	awaitLine(t, side, `msg="health check failed \(1 in a row; registering when checks pass\)"`)
	// Passing, then failing before the warm-up is over: not registered.
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	awaitLine(t, side, `msg="health check passed; registering once checks have passed for --warmup 1.5s"`)
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	// Ten failures (half a second): a count not started again would
	// register the instance well within --warmup of the next pass.
	awaitLine(t, side, `msg="health check failed \(10 in a row`)
	if ids := registrytest.IDs(w.Snapshot()); len(ids) != 0 {
		t.Fatalf("registered %v before its checks passed for --warmup", ids)
	}
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	passed := time.Now()
	registrytest.WaitFor(t, w, "the instance registered after its warm-up", registrytest.HasIDs(be.Addr))
	if took := time.Since(passed); took < warmup {
		t.Fatalf("registered %v after its checks began to pass, before --warmup %v", took.Round(time.Millisecond), warmup)
	}
	// Drained after failed checks, then undrained only once checks have
	// passed for --warmup again, not at the first pass.
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	registrytest.WaitFor(t, w, "the instance drained", func(s registry.Snapshot) bool {
		return len(s.Instances) == 1 && s.Instances[0].Draining
	})
	be.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	passed = time.Now()
	awaitLine(t, side, `msg="health check passed; undraining once checks have passed for --warmup 1.5s"`)
	registrytest.WaitFor(t, w, "the instance undrained after its warm-up", func(s registry.Snapshot) bool {
		return len(s.Instances) == 1 && !s.Instances[0].Draining
	})
	if took := time.Since(passed); took < warmup {
		t.Fatalf("undrained %v after its checks passed again, before --warmup %v", took.Round(time.Millisecond), warmup)
	}
	if code := side.stop(t); code != 0 {
		t.Fatalf("register exited %d; stderr:\n%s", code, side.stderr)
	}
}

// watchLegacy follows the service "legacy" on endpoint through a Discovery
// of its own, closed at the end of the test.
func watchLegacy(t *testing.T, endpoint string) registry.Watcher {
	t.Helper()
	disc, err := etcd.NewDiscovery(newClient(t, endpoint), etcd.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disc.Close() })
	w, err := disc.Watch(context.Background(), "legacy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}
