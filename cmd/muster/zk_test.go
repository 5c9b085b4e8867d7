package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
)

// ls, get, watch, drain, weight and undrain work on a ZooKeeper registry
// given by --registry zk://...
func TestZooKeeperRegistry(t *testing.T) {
	c := zktest.Start(t)
	reg := []string{"--registry", "zk://" + strings.Join(c.Addrs(), ",")}
	r, err := zookeeper.NewRegistrar(c.Addrs(), zookeeper.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	register(t, r, registry.Instance{Name: "user", ID: "a", Addr: "127.0.0.1:9001"})
	register(t, r, registry.Instance{Name: "user", ID: "b", Addr: "127.0.0.1:9002"})

	if got := runOK(t, append([]string{"ls"}, reg...)...); !strings.Contains(got.stdout, "user") || !strings.Contains(got.stdout, "2") {
		t.Fatalf("ls:\n%s", got.stdout)
	}
	got := runOK(t, append([]string{"ls", "user", "-o", "json"}, reg...)...)
	if !strings.Contains(got.stdout, "127.0.0.1:9001") || !strings.Contains(got.stdout, "127.0.0.1:9002") {
		t.Fatalf("ls user -o json:\n%s", got.stdout)
	}
	w := start(t, append([]string{"watch", "user"}, reg...)...)
	w.expectWatch(t, `# user: 2 instances.*`)
	w.expectWatch(t, `= a 127\.0\.0\.1:9001.*`)
	w.expectWatch(t, `= b 127\.0\.0\.1:9002.*`)

	if got := runOK(t, append([]string{"drain", "user", "a"}, reg...)...); got.stdout != "drain user/a: done, weight 100 -> 0\n" {
		t.Fatalf("drain printed %q", got.stdout)
	}
	w.expectWatch(t, `~ a 127\.0\.0\.1:9001 .*weight 100->0.*`)
	if got := runOK(t, append([]string{"get", "user", "a"}, reg...)...); !strings.Contains(got.stdout, "0*") {
		t.Fatalf("get after drain (weight 0, marked as an override):\n%s", got.stdout)
	}
	if got := runOK(t, append([]string{"weight", "user", "b", "50"}, reg...)...); got.stdout != "weight user/b: done, weight 100 -> 50\n" {
		t.Fatalf("weight printed %q", got.stdout)
	}
	w.expectWatch(t, `~ b 127\.0\.0\.1:9002 .*weight 100->50.*`)
	if got := runOK(t, append([]string{"undrain", "user", "a"}, reg...)...); got.stdout != "undrain user/a: override removed, weight 0 -> 100\n" {
		t.Fatalf("undrain printed %q", got.stdout)
	}
	w.expectWatch(t, `~ a 127\.0\.0\.1:9001 .*weight 0->100.*`)

	if r := run(append([]string{"get", "user", "zz"}, reg...)...); r.code != 1 || !strings.Contains(r.stderr, "no such instance") {
		t.Fatalf("get of a missing instance: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := run(append([]string{"deregister", "user", "a"}, reg...)...); r.code != exitUsage {
		t.Fatalf("deregister with a ZooKeeper registry: exit %d, want %d; stderr %q", r.code, exitUsage, r.stderr)
	}
	if r := run("ls", "user", "--registry", "zk://127.0.0.1:1", "--timeout", "500ms"); r.code != 1 || !strings.Contains(r.stderr, "did not answer within --timeout 500ms") {
		t.Fatalf("ls of an unreachable ZooKeeper: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := run("ls", "--registry", "zk://"); r.code != exitUsage {
		t.Fatalf("ls --registry zk:// : exit %d, want %d", r.code, exitUsage)
	}
	if r := run("ls", "--registry", "consul://x:1"); r.code != exitUsage {
		t.Fatalf("ls --registry consul://: exit %d, want %d", r.code, exitUsage)
	}
}

// canary and policy work on a ZooKeeper registry too: set, shown, read by
// the library, refused when bad (naming the field, nothing written), and
// removed.
func TestZooKeeperSettings(t *testing.T) {
	c := zktest.Start(t)
	reg := []string{"--registry", "zk://" + strings.Join(c.Addrs(), ",")}
	ctx := context.Background()
	if got := runOK(t, append([]string{"canary", "user", "blue", "5"}, reg...)...); got.stdout != "user: 5% of uncolored calls to blue\n" {
		t.Fatalf("canary set printed %q", got.stdout)
	}
	if got := runOK(t, append([]string{"canary", "user"}, reg...)...); got.stdout != "user: 5% of uncolored calls to blue\n" {
		t.Fatalf("canary show printed %q", got.stdout)
	}
	if cn, ok, err := zookeeper.GetCanary(ctx, c.Addrs(), "user"); err != nil || !ok || cn != (registry.Canary{Color: "blue", Percent: 5}) {
		t.Fatalf("stored canary %+v, %v, %v", cn, ok, err)
	}
	if got := runOK(t, append([]string{"canary", "user", "off"}, reg...)...); got.stdout != "user: canary off\n" {
		t.Fatalf("canary off printed %q", got.stdout)
	}
	if got := runOK(t, append([]string{"canary", "user"}, reg...)...); got.stdout != "user: no canary\n" {
		t.Fatalf("canary show after off printed %q", got.stdout)
	}

	if got := runOK(t, append([]string{"policy", "user", "set", "timeout=800ms", "maxConcurrent=10"}, reg...)...); got.stdout != "timeout 800ms\nmaxConcurrent 10\n" {
		t.Fatalf("policy set printed %q", got.stdout)
	}
	p, ok, err := zookeeper.GetPolicy(ctx, c.Addrs(), "user")
	if err != nil || !ok || p.Timeout != 800*time.Millisecond || p.MaxConcurrent != 10 {
		t.Fatalf("stored policy %+v, %v, %v", p, ok, err)
	}
	if r := run(append([]string{"policy", "user", "set", "timeout=2h"}, reg...)...); r.code != exitUsage || !strings.Contains(r.stderr, "timeout") {
		t.Fatalf("policy set timeout=2h: exit %d, stderr %q; want a usage error naming timeout", r.code, r.stderr)
	}
	if got := runOK(t, append([]string{"policy", "user", "set", "timeout="}, reg...)...); got.stdout != "maxConcurrent 10\n" {
		t.Fatalf("policy set timeout= printed %q", got.stdout)
	}
	if got := runOK(t, append([]string{"policy", "user", "clear"}, reg...)...); got.stdout != "user: policy cleared\n" {
		t.Fatalf("policy clear printed %q", got.stdout)
	}
	if got := runOK(t, append([]string{"policy", "user", "show", "-o", "json"}, reg...)...); strings.TrimSpace(got.stdout) != "null" {
		t.Fatalf("policy show -o json after clear printed %q", got.stdout)
	}
}
