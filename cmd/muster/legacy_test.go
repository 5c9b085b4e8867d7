package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/ssetest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/legacy"
)

// TestLsLayouts lists a service in each legacy layout, values written as
// each framework writes them, and refuses inconsistent flags.
func TestLsLayouts(t *testing.T) {
	s := startServe(t, t.TempDir())
	cli := newClient(t, s.endpoint)
	putRaw(t, cli, "user.rpc/7587867878", "10.0.0.1:9000")
	putRaw(t, cli, "/microservices/user/k1", `{"id":"k1","name":"user","version":"v1","metadata":{},"endpoints":["grpc://10.0.0.2:9000?isSecure=false"]}`)
	putRaw(t, cli, "user/n1", `{"Op":0,"Addr":"10.0.0.3:9000","Metadata":null}`)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--layout", "go-zero", "--legacy-name", "user.rpc"}, "7587867878  10.0.0.1:9000"},
		{[]string{"--layout", "kratos"}, "k1  10.0.0.2:9000  v1"},
		{[]string{"--layout", "etcd-naming"}, "n1  10.0.0.3:9000"},
	} {
		r := runOK(t, append([]string{"ls", "user", "--endpoints", s.endpoint}, c.args...)...)
		if !strings.Contains(r.stdout, c.want) {
			t.Errorf("ls user %v:\n%s\nwant a row starting %q", c.args, r.stdout, c.want)
		}
	}
	for _, args := range [][]string{
		{"ls", "--layout", "go-zero"},
		{"ls", "user", "--layout", "zookeeper"},
		{"ls", "user", "--legacy-name", "user.rpc"},
	} {
		if r := run(append(args, "--endpoints", s.endpoint)...); r.code == 0 {
			t.Errorf("%v: want a usage error, got %+v", args, r)
		}
	}
}

// A go-zero layout read without go-zero's key for the service finds
// nothing under the Muster name: ls says which key it read and how to give
// go-zero's, and a layout with no service says to name one.
func TestLsSaysTheGoZeroKeyIsMissing(t *testing.T) {
	endpoint, _ := legacyFixture(t)
	r := runOK(t, "ls", "user", "--endpoints", endpoint, "--legacy", "go-zero")
	matchLines(t, "ls user --legacy go-zero", r.stdout,
		`ID +ADDR +SOURCE +VERSION +ZONE +REGION +COLOR +WEIGHT +METADATA +AGE`,
		`user-1 +10\.0\.0\.1:9000 +muster .*`)
	want := `--legacy go-zero: no go-zero instance under the key prefix "user/" (the service's Muster name): go-zero servers register under ` +
		`their Etcd.Key (RpcServerConf.Etcd.Key, such as user.rpc); give it: --legacy go-zero:user.rpc`
	if !strings.Contains(r.stderr, want) {
		t.Errorf("ls user --legacy go-zero: stderr\n%s\nwant\n%s", r.stderr, want)
	}
	r = runOK(t, "ls", "user", "--endpoints", endpoint, "--layout", "go-zero")
	want = "no instances of user\n" +
		`no go-zero instance under the key prefix "user/" (the service's Muster name): go-zero servers register under ` +
		"their Etcd.Key (RpcServerConf.Etcd.Key, such as user.rpc); give it: --legacy-name user.rpc\n"
	if !strings.Contains(r.stderr, want) { // after the values skipped (user/n1 is etcd naming's)
		t.Errorf("ls user --layout go-zero: stderr\n%s\nwant\n%s", r.stderr, want)
	}
	if r := runOK(t, "ls", "user", "--endpoints", endpoint, "--legacy", "go-zero:user.rpc"); strings.Contains(r.stderr, "Etcd.Key") {
		t.Errorf("ls user --legacy go-zero:user.rpc: a hint with the key given: %s", r.stderr)
	}

	r = run("ls", "--endpoints", endpoint, "--layout", "go-zero", "--legacy-name", "user.rpc")
	want = "--layout go-zero reads one service: name it (its Muster name), as in: muster ls user --layout go-zero --legacy-name user.rpc"
	if r.code != exitUsage || !strings.Contains(r.stderr, want) {
		t.Errorf("ls --layout go-zero --legacy-name user.rpc: %+v; want exit %d and %q", r, exitUsage, want)
	}
}

// legacyFixture is a registry with service user in Muster's layout (one
// instance) and in the three legacy layouts, one go-zero value at the
// Muster instance's address, and service order only in go-zero's layout.
func legacyFixture(t *testing.T) (endpoint string, cli *clientv3.Client) {
	t.Helper()
	s := startServe(t, t.TempDir())
	r := newRegistrar(t, s.endpoint)
	register(t, r, registry.Instance{ID: "user-1", Name: "user", Addr: "10.0.0.1:9000", Metadata: map[string]string{"tier": "gold"}})
	cli = newClient(t, s.endpoint)
	putRaw(t, cli, "user.rpc/7587867878", "10.0.0.1:9000") // the Muster instance, still in go-zero's layout
	putRaw(t, cli, "user.rpc/42", "10.0.0.4:9000")
	putRaw(t, cli, "/microservices/user/k1", `{"id":"k1","name":"user","version":"v1","metadata":{},"endpoints":["grpc://10.0.0.2:9000?isSecure=false"]}`)
	putRaw(t, cli, "user/n1", `{"Op":0,"Addr":"10.0.0.3:9000","Metadata":null}`)
	putRaw(t, cli, "order.rpc/7", "10.0.1.1:9000")
	return s.endpoint, cli
}

// TestLsLegacy lists a service merged with its legacy sources: a SOURCE
// column says where each instance was found, an address in Muster's
// registry and go-zero's is listed once as Muster's, and the services list
// counts instances per source, with a service found in a legacy layout
// only.
func TestLsLegacy(t *testing.T) {
	endpoint, _ := legacyFixture(t)
	all := []string{"--legacy", "go-zero:user.rpc", "--legacy", "kratos", "--legacy", "user=etcd-naming"}
	r := runOK(t, append([]string{"ls", "user", "--endpoints", endpoint}, all...)...)
	matchLines(t, "ls user "+strings.Join(all, " "), r.stdout,
		`ID +ADDR +SOURCE +VERSION +ZONE +REGION +COLOR +WEIGHT +METADATA +AGE`,
		`42 +10\.0\.0\.4:9000 +go-zero +- .*`,
		`k1 +10\.0\.0\.2:9000 +kratos +v1 .*`,
		`n1 +10\.0\.0\.3:9000 +etcd-naming +- .*`,
		`user-1 +10\.0\.0\.1:9000 +muster +- +- +- +- +100 +tier=gold +\S+`)

	r = runOK(t, "ls", "user", "--endpoints", endpoint, "--legacy", "kratos", "-o", "json")
	var got []registry.Instance
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("ls -o json: %v\n%s", err, r.stdout)
	}
	if len(got) != 2 || got[0].Metadata[legacy.SourceKey] != "kratos" || got[1].Metadata[legacy.SourceKey] != "muster" {
		t.Fatalf("ls -o json --legacy kratos: %+v, want k1 from kratos and user-1 from muster in metadata %q", got, legacy.SourceKey)
	}

	r = runOK(t, "ls", "--endpoints", endpoint, "--legacy", "user=go-zero:user.rpc", "--legacy", "order=go-zero:order.rpc", "--legacy", "kratos")
	matchLines(t, "ls --legacy ...", r.stdout,
		`SERVICE +INSTANCES +SOURCES +CANARY`,
		`order +1 +go-zero:1 +-`,
		`user +3 +muster:1,go-zero:1,kratos:1 +-`)
	r = runOK(t, "ls", "--endpoints", endpoint, "--legacy", "order=go-zero:order.rpc", "-o", "json")
	var rows []serviceRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("ls --legacy -o json: %v\n%s", err, r.stdout)
	}
	if len(rows) != 2 || rows[0].Name != "order" || rows[0].Sources["go-zero"] != 1 || rows[1].Sources["muster"] != 1 {
		t.Fatalf("ls --legacy -o json: %s\nwant order with sources {go-zero: 1}, user with {muster: 1}", r.stdout)
	}

	for _, args := range [][]string{
		{"ls", "user", "--legacy", "order=go-zero"},
		{"ls", "--legacy", "go-zero:user.rpc"},
		{"ls", "user", "--legacy", "zookeeper"},
		{"ls", "user", "--legacy", "Bad=kratos"},
		{"ls", "user", "--layout", "go-zero", "--legacy", "kratos"},
		{"watch", "user", "--legacy", "order=kratos"},
	} {
		if r := run(append(args, "--endpoints", endpoint)...); r.code != exitUsage {
			t.Errorf("%v: want a usage error, got %+v", args, r)
		}
	}
}

// matchLines checks that out has one line per regular expression in want,
// each matching its line in full.
func matchLines(t *testing.T, what, out string, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%s: %d lines, want %d:\n%s", what, len(lines), len(want), out)
	}
	for i, re := range want {
		if !regexp.MustCompile("^(?:" + re + ")$").MatchString(lines[i]) {
			t.Errorf("%s: line %d is %q, want it to match %q", what, i+1, lines[i], re)
		}
	}
}

// TestWatchLegacy follows a service merged with go-zero's layout: each line
// names the instance's source, and an address that moves to Muster's
// registry is replaced by Muster's instance.
func TestWatchLegacy(t *testing.T) {
	endpoint, cli := legacyFixture(t)
	w := start(t, "watch", "user", "--endpoints", endpoint, "--legacy", "go-zero:user.rpc")
	w.expectWatch(t, `# user: 2 instances at revision \d+; watching for changes`)
	w.expectWatch(t, `= 42 10\.0\.0\.4:9000 \(source go-zero, weight 100\)`)
	w.expectWatch(t, `= user-1 10\.0\.0\.1:9000 \(source muster, weight 100, metadata tier=gold\)`)

	putRaw(t, cli, "user.rpc/43", "10.0.0.5:9000")
	w.expectWatch(t, `\+ 43 10\.0\.0\.5:9000 \(source go-zero, weight 100\)`)

	r := newRegistrar(t, endpoint)
	register(t, r, registry.Instance{ID: "user-4", Name: "user", Addr: "10.0.0.4:9000"})
	w.expectWatch(t, `- 42 10\.0\.0\.4:9000`)
	w.expectWatch(t, `\+ user-4 10\.0\.0\.4:9000 \(source muster, weight 100\)`)

	// An ID two sources use for different instances: each followed as
	// its own instance, not as one that changes.
	register(t, r, registry.Instance{ID: "43", Name: "user", Addr: "10.0.0.6:9000"})
	w.expectWatch(t, `\+ 43 10\.0\.0\.6:9000 \(source muster, weight 100\)`)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := cli.Delete(ctx, "user.rpc/43"); err != nil {
		t.Fatal(err)
	}
	w.expectWatch(t, `- 43 10\.0\.0\.5:9000`)
	if code := w.stop(t); code != exitOK {
		t.Fatalf("watch: exit code %d; stderr:\n%s", code, w.stderr)
	}
}

// TestWatchLayout follows a service in go-zero's layout, as ls --layout
// lists it.
func TestWatchLayout(t *testing.T) {
	endpoint, cli := legacyFixture(t)
	w := start(t, "watch", "user", "--endpoints", endpoint, "--layout", "go-zero", "--legacy-name", "user.rpc")
	w.expectWatch(t, `# user: 2 instances at revision \d+; watching for changes`)
	w.expectWatch(t, `= 42 10\.0\.0\.4:9000 \(weight 100\)`)
	w.expectWatch(t, `= 7587867878 10\.0\.0\.1:9000 \(weight 100\)`)
	putRaw(t, cli, "user.rpc/43", "10.0.0.5:9000")
	w.expectWatch(t, `\+ 43 10\.0\.0\.5:9000 \(weight 100\)`)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := cli.Delete(ctx, "user.rpc/42"); err != nil {
		t.Fatal(err)
	}
	w.expectWatch(t, `- 42 10\.0\.0\.4:9000`)
	if code := w.stop(t); code != exitOK {
		t.Fatalf("watch: exit code %d; stderr:\n%s", code, w.stderr)
	}
	if r := run("watch", "--endpoints", endpoint, "user", "--layout", "consul"); r.code != exitUsage {
		t.Fatalf("watch --layout consul: want a usage error, got %+v", r)
	}
}

// TestConsoleCommandLegacy serves muster console with --legacy: the service
// page's state names each instance's source, and a service found only in a
// legacy layout is listed.
func TestConsoleCommandLegacy(t *testing.T) {
	endpoint, _ := legacyFixture(t)
	flags := consoleFlags{}
	cmd := &cobra.Command{}
	flags.legacy.addLegacy(cmd, "")
	if err := cmd.ParseFlags([]string{"--legacy", "user=go-zero:user.rpc", "--legacy", "order=go-zero:order.rpc", "--legacy", "kratos"}); err != nil {
		t.Fatal(err)
	}
	url := startConsole(t, endpoint, consoleOptions{listen: "127.0.0.1:0", consoleFlags: flags})
	for _, c := range []struct{ path, want string }{
		{"api/service/events?name=user", `"id":"k1","addr":"10.0.0.2:9000","source":"kratos"`},
		{"api/service/events?name=user", `"id":"user-1","addr":"10.0.0.1:9000","source":"muster"`},
		{"api/service/events?name=user", `"id":"42","addr":"10.0.0.4:9000","source":"go-zero"`},
		{"api/services/events", `"name":"order","instances":1`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		data := ssetest.First(ctx, t, url+c.path, nil, "state").Data
		cancel()
		if !strings.Contains(data, c.want) {
			t.Errorf("%s: first state %s\nwant it to contain %s", c.path, data, c.want)
		}
	}
	for _, args := range [][]string{
		{"console", "--legacy", "go-zero:user.rpc"},
		{"serve", "--metrics-listen", "", "--console-legacy", "kratos"},
		{"serve", "--console-legacy", "go-zero:user.rpc"},
	} {
		if r := run(args...); r.code != exitUsage {
			t.Errorf("%v: want a usage error, got %+v", args, r)
		}
	}
}
