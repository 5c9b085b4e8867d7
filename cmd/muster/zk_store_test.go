package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/internal/testkit/zktest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/zookeeper"
)

// zkRegistry starts a ZooKeeper ensemble and returns it with the
// --registry flag that names it.
func zkRegistry(t *testing.T) (*zktest.Cluster, []string) {
	t.Helper()
	c := zktest.Start(t)
	return c, []string{"--registry", "zk://" + strings.Join(c.Addrs(), ",")}
}

// zkRegistrar returns a Registrar in the ZooKeeper ensemble c, closed
// when the test ends.
func zkRegistrar(t *testing.T, c *zktest.Cluster) *zookeeper.Registrar {
	t.Helper()
	r, err := zookeeper.NewRegistrar(c.Addrs(), zookeeper.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// zkWatch follows service in the ZooKeeper ensemble c, as clients do.
func zkWatch(t *testing.T, c *zktest.Cluster, service string) registry.Watcher {
	t.Helper()
	d, err := zookeeper.NewDiscovery(c.Addrs(), zookeeper.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	w, err := d.Watch(context.Background(), service)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// On ZooKeeper, history and deregister fail with a usage error that says
// which part of an Admin the registry lacks, before reading anything, and
// deregister leaves the instance registered; the flags that read etcd's
// layouts or clusters are refused with it.
func TestZooKeeperSaysWhatItLacks(t *testing.T) {
	c, reg := zkRegistry(t)
	r := zkRegistrar(t, c)
	register(t, r, registry.Instance{Name: "user", ID: "a", Addr: "127.0.0.1:9001"})

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"history", "user"}, []string{"history reads the journal of operator writes", "registry.HistoryReader"}},
		{[]string{"history"}, []string{"registry.HistoryReader"}},
		{[]string{"deregister", "user", "a"}, []string{"deregister removes an instance another process registered", "registry.InstanceRemover", "use drain"}},
		// Refused before the instance is looked for.
		{[]string{"deregister", "user", "zz"}, []string{"registry.InstanceRemover"}},
		{[]string{"ls", "user", "--layout", "go-zero"}, []string{"--layout: not with --registry"}},
		{[]string{"watch", "user", "--legacy", "kratos"}, []string{"--legacy: not with --registry"}},
		{[]string{"drain", "user", "a", "--cluster", "eu=http://127.0.0.1:1"}, []string{"--cluster names etcd clusters: not with --registry"}},
		{[]string{"doctor"}, []string{"doctor works on etcd only"}},
	} {
		res := run(append(c.args, reg...)...)
		if res.code != exitUsage {
			t.Errorf("muster %v on ZooKeeper: exit %d, want %d (usage); stderr %q", c.args, res.code, exitUsage, res.stderr)
		}
		for _, want := range c.want {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("muster %v on ZooKeeper: stderr %q lacks %q", c.args, res.stderr, want)
			}
		}
	}
	if got := runOK(t, append([]string{"ls", "user"}, reg...)...); !strings.Contains(got.stdout, "127.0.0.1:9001") {
		t.Fatalf("ls user after a refused deregister:\n%s", got.stdout)
	}
}

// On ZooKeeper, ls shows the canary and the call policy, and watch follows
// the canary, as on etcd.
func TestZooKeeperShowsSettings(t *testing.T) {
	c, reg := zkRegistry(t)
	r := zkRegistrar(t, c)
	register(t, r, registry.Instance{Name: "user", ID: "a", Addr: "127.0.0.1:9001"})
	runOK(t, append([]string{"canary", "user", "blue", "5"}, reg...)...)
	runOK(t, append([]string{"policy", "user", "set", "timeout=800ms"}, reg...)...)

	if got := runOK(t, append([]string{"ls"}, reg...)...); got.stdout != "SERVICE  INSTANCES  CANARY\nuser     1          5% blue\n" {
		t.Fatalf("ls:\n%s", got.stdout)
	}
	got := runOK(t, append([]string{"ls", "user"}, reg...)...)
	if !strings.Contains(got.stdout, "\ncanary: 5% of uncolored calls to blue\npolicy: timeout 800ms (muster policy user)\n") {
		t.Fatalf("ls user:\n%s", got.stdout)
	}
	w := start(t, append([]string{"watch", "user"}, reg...)...)
	w.expectWatch(t, `# user: 1 instance.*`)
	w.expectWatch(t, `= a 127\.0\.0\.1:9001.*`)
	w.expectWatch(t, `% canary 5% of uncolored calls to blue`)
	runOK(t, append([]string{"canary", "user", "off"}, reg...)...)
	w.expectWatch(t, `% canary off`)
}

// muster register keeps an instance registered in ZooKeeper until it
// stops, when the instance leaves at once.
func TestZooKeeperRegisterCommand(t *testing.T) {
	c, reg := zkRegistry(t)
	be := testbackend.Start(t)
	w := zkWatch(t, c, "greeter")
	side := startReading(t, true, append([]string{"register", "--name", "greeter", "--addr", be.Addr, "--ttl", "10s"}, reg...)...)
	awaitLine(t, side, `msg=registered`)
	registrytest.WaitFor(t, w, "the sidecar's instance", registrytest.HasIDs(be.Addr))
	if code := side.stop(t); code != 0 {
		t.Fatalf("register exited %d on SIGTERM; stderr:\n%s", code, side.stderr)
	}
	if !strings.Contains(side.stderr.String(), "deregistered on exit") {
		t.Fatalf("register's log lacks the deregistration:\n%s", side.stderr)
	}
	start := time.Now()
	registrytest.WaitFor(t, w, "the instance gone on exit", registrytest.HasIDs())
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the instance left %v after the sidecar stopped; want at once (session closed), not at the session timeout", took)
	}
}

// muster xds serves a service registered in ZooKeeper and follows its
// canary there: at 100 % every uncolored call goes to the canary's color.
func TestZooKeeperXDSCommand(t *testing.T) {
	c, reg := zkRegistry(t)
	base, blue := testbackend.Start(t), testbackend.Start(t)
	r := zkRegistrar(t, c)
	register(t, r, registry.Instance{Name: "greeter", Addr: base.Addr})
	register(t, r, registry.Instance{Name: "greeter", Addr: blue.Addr, Metadata: map[string]string{"color": "blue"}})
	runOK(t, append([]string{"canary", "greeter", "blue", "100"}, reg...)...)
	cp := start(t, append([]string{"xds", "--listen", "127.0.0.1:0", "--services", "greeter"}, reg...)...)
	if got := xdsCallThen(t, xdsAddr(t, cp.stderr), "greeter", nil); got != blue.Addr {
		t.Fatalf("an uncolored call with a 100%% canary to blue was served by %s, want the blue instance %s", got, blue.Addr)
	}
	if code := cp.stop(t); code != 0 {
		t.Fatalf("muster xds exit code %d; stderr:\n%s", code, cp.stderr)
	}
}
