package main

import (
	"strings"
	"testing"

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
	w.expect(t, `# user: 2 instances.*`)
	w.expect(t, `= a 127\.0\.0\.1:9001.*`)
	w.expect(t, `= b 127\.0\.0\.1:9002.*`)

	if got := runOK(t, append([]string{"drain", "user", "a"}, reg...)...); got.stdout != "drain user/a: done, weight 100 -> 0\n" {
		t.Fatalf("drain printed %q", got.stdout)
	}
	w.expect(t, `~ a 127\.0\.0\.1:9001 .*weight 100->0.*`)
	if got := runOK(t, append([]string{"get", "user", "a"}, reg...)...); !strings.Contains(got.stdout, "0*") {
		t.Fatalf("get after drain (weight 0, marked as an override):\n%s", got.stdout)
	}
	if got := runOK(t, append([]string{"weight", "user", "b", "50"}, reg...)...); got.stdout != "weight user/b: done, weight 100 -> 50\n" {
		t.Fatalf("weight printed %q", got.stdout)
	}
	w.expect(t, `~ b 127\.0\.0\.1:9002 .*weight 100->50.*`)
	if got := runOK(t, append([]string{"undrain", "user", "a"}, reg...)...); got.stdout != "undrain user/a: override removed, weight 0 -> 100\n" {
		t.Fatalf("undrain printed %q", got.stdout)
	}
	w.expect(t, `~ a 127\.0\.0\.1:9001 .*weight 0->100.*`)

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
