package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/ssetest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/promsd"
	"github.com/musterhq/muster/registry"
)

// ls over two independent etcd clusters: the union of a service with a
// CLUSTER column, the same ID in both kept apart; services with their
// instances per cluster; a cluster that does not answer is named and left
// out.
func TestLsClusters(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	fixClock(t, now)
	eu, us := startServe(t, t.TempDir()), startServe(t, t.TempDir())
	register(t, newRegistrar(t, eu.endpoint), registry.Instance{ID: "user-1", Name: "user", Addr: "10.0.0.1:9000", Region: "eu-1", RegisteredAt: now})
	register(t, newRegistrar(t, us.endpoint), registry.Instance{ID: "user-1", Name: "user", Addr: "10.1.0.1:9000", RegisteredAt: now})
	both := []string{"--cluster", "eu=" + eu.endpoint, "--cluster", "us=" + us.endpoint}

	r := runOK(t, append([]string{"ls", "user"}, both...)...)
	want := "" +
		"ID      ADDR           CLUSTER  VERSION  ZONE  REGION  COLOR  WEIGHT  METADATA  AGE\n" +
		"user-1  10.0.0.1:9000  eu       -        -     eu-1    -      100     -         0s\n" +
		"user-1  10.1.0.1:9000  us       -        -     -       -      100     -         0s\n"
	if r.stdout != want {
		t.Fatalf("ls user --cluster x2:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = runOK(t, append([]string{"ls"}, both...)...)
	if want := "SERVICE  INSTANCES  CLUSTERS\nuser     2          eu:1,us:1\n"; r.stdout != want {
		t.Fatalf("ls --cluster x2:\n%s\nwant:\n%s", r.stdout, want)
	}
	// A cluster's region= is the region of its instances that set none.
	r = runOK(t, "ls", "user", "--cluster", "eu="+eu.endpoint+",region=eu-9", "--cluster", "us="+us.endpoint+",region=us-9")
	if !strings.Contains(r.stdout, "10.0.0.1:9000  eu       -        -     eu-1") || !strings.Contains(r.stdout, "10.1.0.1:9000  us       -        -     us-9") {
		t.Fatalf("ls with regions given:\n%s", r.stdout)
	}
	// A cluster nobody serves: named on stderr, the other listed.
	r = runOK(t, "ls", "user", "--timeout", "1s", "--cluster", "eu="+eu.endpoint, "--cluster", "gone=http://127.0.0.1:9")
	if !strings.Contains(r.stdout, "10.0.0.1:9000  eu") || !strings.Contains(r.stderr, "cluster gone did not answer") {
		t.Fatalf("ls with a cluster down:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

func TestClusterFlagErrors(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"eu", `--cluster "eu": want NAME=ENDPOINTS`},
		{"=http://127.0.0.1:2379", `--cluster "=http://127.0.0.1:2379": empty cluster name`},
		{"eu=", `--cluster "eu=": no endpoints`},
		{"eu=ftp://127.0.0.1:2379", `--cluster eu "ftp://127.0.0.1:2379": unknown scheme`},
		{"eu=127.0.0.1", `--cluster eu "127.0.0.1": no port`},
	} {
		r := run("ls", "--cluster", tc.value)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("ls --cluster %q: exit %d, stderr %q; want an error with %q", tc.value, r.code, r.stderr, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "eu=http://127.0.0.1:1,pem=x"}, `--cluster eu: unknown key "pem"; want one of cacert, cert, key, user, password-file, region`},
		{[]string{"--cluster", "eu=http://127.0.0.1:1,region=eu 1"}, `--cluster eu: region "eu 1": byte 2 is not printable ASCII`},
		{[]string{"--cluster", "eu=http://127.0.0.1:1,user=a:b,user=c:d"}, "--cluster eu: user is given twice"},
		{[]string{"--cluster", "eu=https://127.0.0.1:1,cert=c.pem"}, "--cluster eu: --cert and --key go together"},
		{[]string{"--cluster", "eu=http://127.0.0.1:1,cacert=ca.pem"}, "--cluster eu: --cacert, --cert and --key need https:// endpoints"},
		{[]string{"--cacert", "ca.pem", "--cluster", "eu=https://127.0.0.1:1", "--cluster", "us=http://127.0.0.1:2"},
			"--cluster us: --cacert, --cert and --key need https:// endpoints"},
		{[]string{"--cluster", "eu=http://127.0.0.1:1,user=bob"}, "--cluster eu: --user bob: no password"},
	} {
		t.Setenv(passwordEnv, "")
		r := run(append([]string{"ls"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("ls %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), r.code, r.stderr, exitUsage, tc.want)
		}
	}
	r := run("ls", "--cluster", "eu=http://127.0.0.1:1", "--cluster", "eu=http://127.0.0.1:2")
	if r.code == 0 || !strings.Contains(r.stderr, `the name "eu" is used twice`) {
		t.Errorf("a name used twice: exit %d, stderr %q", r.code, r.stderr)
	}
}

// watch over two clusters: each instance says its cluster; one cluster's
// outage is told for that cluster, and the other's changes go on.
func TestWatchClusters(t *testing.T) {
	eu, us := startServe(t, t.TempDir()), startServe(t, t.TempDir())
	reu, rus := newRegistrar(t, eu.endpoint), newRegistrar(t, us.endpoint)
	register(t, reu, registry.Instance{ID: "user-1", Name: "user", Addr: "10.0.0.1:9000", Region: "eu-1"})
	register(t, rus, registry.Instance{ID: "user-1", Name: "user", Addr: "10.1.0.1:9000"})
	w := start(t, "watch", "user", "--timeout", "2s", "--cluster", "eu="+eu.endpoint, "--cluster", "us="+us.endpoint)
	w.expectWatch(t, `# user: 2 instances at revision \d+; watching for changes`)
	w.expectWatch(t, `= user-1 10\.0\.0\.1:9000 \(cluster eu, region eu-1, weight 100\)`)
	w.expectWatch(t, `= user-1 10\.1\.0\.1:9000 \(cluster us, weight 100\)`)

	us.stop(t)
	w.expectWatch(t, `! cluster us stale since \S+: .+ \(showing its last known 1 instance\)`)
	register(t, reu, registry.Instance{ID: "user-2", Name: "user", Addr: "10.0.0.2:9000"})
	w.expectWatch(t, `\+ user-2 10\.0\.0\.2:9000 \(cluster eu, weight 100\)`)
	restartServe(t, us)
	w.expectWatch(t, `! cluster us fresh again`)
	if code := w.stop(t); code != exitOK {
		t.Fatalf("watch exited with %d; stderr:\n%s", code, w.stderr.String())
	}
}

// xds over two clusters serves their union: an xDS client calls the
// backend registered in either.
func TestXDSClusters(t *testing.T) {
	eu, us := startServe(t, t.TempDir()), startServe(t, t.TempDir())
	beEU, beUS := testbackend.Start(t), testbackend.Start(t)
	register(t, newRegistrar(t, eu.endpoint), registry.Instance{Name: "greeter", Addr: beEU.Addr})
	cp := start(t, "xds", "--listen", "127.0.0.1:0", "--services", "greeter",
		"--cluster", "eu="+eu.endpoint, "--cluster", "us="+us.endpoint)
	addr := xdsAddr(t, cp.stderr)
	if got := xdsCallThen(t, addr, "greeter", nil); got != beEU.Addr {
		t.Fatalf("call served by %s, want eu's %s", got, beEU.Addr)
	}
	// The eu backend leaves, a us one joins: the union follows both.
	beEU.Stop()
	register(t, newRegistrar(t, us.endpoint), registry.Instance{Name: "greeter", Addr: beUS.Addr})
	if got := xdsCallThen(t, addr, "greeter", nil); got != beUS.Addr {
		t.Fatalf("call served by %s, want us's %s", got, beUS.Addr)
	}
	if code := cp.stop(t); code != 0 {
		t.Fatalf("muster xds exit code %d; stderr:\n%s", code, cp.stderr)
	}
}

// Each --cluster value may give its cluster's own TLS files and login,
// in place of the flags': two clusters with CAs of their own and different
// users are read in one command.
func TestClusterOwnTLSAndAuth(t *testing.T) {
	eu, us := newSecureRegistry(t), newSecureRegistry(t)
	register(t, us.r, registry.Instance{ID: "user-2", Name: "user", Addr: "10.1.0.2:9000"})
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("user-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	own := func(s secureRegistry, login ...string) string {
		f := s.c.TLS()
		return strings.Join(append([]string{s.endpoint, "cacert=" + f.CAFile, "cert=" + f.CertFile, "key=" + f.KeyFile}, login...), ",")
	}
	t.Setenv(passwordEnv, "")
	r := runOK(t, "ls", "user", "--cluster", "eu="+own(eu, "user=root:root-pw"),
		"--cluster", "us="+own(us, "user=user-svc", "password-file="+pwFile))
	for _, want := range []string{"user-1  10.0.0.1:9000  eu", "user-1  10.0.0.1:9000  us", "user-2  10.1.0.2:9000  us"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("ls over two clusters, each with its own CA and login: no %q in\n%s", want, r.stdout)
		}
	}
	// The flags apply to every cluster but where a value gives its own:
	// eu's CA and login from the flags (the password from a file), us's
	// from its value.
	f := eu.c.TLS()
	rootPW := filepath.Join(t.TempDir(), "root-pw")
	if err := os.WriteFile(rootPW, []byte("root-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runOK(t, "ls", "--cacert", f.CAFile, "--cert", f.CertFile, "--key", f.KeyFile, "--user", "root", "--password-file", rootPW,
		"--cluster", "eu="+eu.endpoint, "--cluster", "us="+own(us, "user=root:root-pw"))
	if want := "SERVICE  INSTANCES  CLUSTERS\nuser     3          eu:1,us:2\n"; r.stdout != want {
		t.Fatalf("ls with the flags for eu and its own settings for us:\n%s\nwant:\n%s", r.stdout, want)
	}
	// Without its own CA, us is not trusted: it is named, eu is listed.
	r = runOK(t, "ls", "user", "--timeout", "1s", "--cacert", f.CAFile, "--cert", f.CertFile, "--key", f.KeyFile,
		"--cluster", "eu="+eu.endpoint+",user=root:root-pw", "--cluster", "us="+us.endpoint)
	if !strings.Contains(r.stdout, "10.0.0.1:9000  eu") || !strings.Contains(r.stderr, "cluster us did not answer") {
		t.Fatalf("ls with us's CA missing:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

// drain, weight and undrain over several clusters act on the cluster --in
// names, and only there: the same ID in the other cluster is another
// instance.
func TestDrainInCluster(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	fixClock(t, now)
	eu, us := startServe(t, t.TempDir()), startServe(t, t.TempDir())
	register(t, newRegistrar(t, eu.endpoint), registry.Instance{ID: "user-1", Name: "user", Addr: "10.0.0.1:9000", RegisteredAt: now})
	register(t, newRegistrar(t, us.endpoint), registry.Instance{ID: "user-1", Name: "user", Addr: "10.1.0.1:9000", RegisteredAt: now})
	both := []string{"--cluster", "eu=" + eu.endpoint, "--cluster", "us=" + us.endpoint}
	weights := func() string {
		t.Helper()
		out := runOK(t, append([]string{"ls", "user", "-o", "json"}, both...)...).stdout
		var ins []struct {
			Addr   string `json:"addr"`
			Weight int    `json:"weight"`
		}
		if err := json.Unmarshal([]byte(out), &ins); err != nil {
			t.Fatalf("ls -o json: %v\n%s", err, out)
		}
		var parts []string
		for _, in := range ins {
			parts = append(parts, fmt.Sprintf("%s=%d", in.Addr, in.Weight))
		}
		return strings.Join(parts, " ")
	}

	r := run(append([]string{"drain", "user", "user-1"}, both...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "2 clusters are given (eu, us): name the one to act on with --in") {
		t.Fatalf("drain over two clusters without --in: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runOK(t, append([]string{"drain", "user", "user-1", "--in", "us"}, both...)...)
	if want := "drain user/user-1 in cluster us: done, weight 100 -> 0\n"; r.stdout != want {
		t.Fatalf("drain --in us printed %q, want %q", r.stdout, want)
	}
	if got, want := weights(), "10.0.0.1:9000=100 10.1.0.1:9000=0"; got != want {
		t.Fatalf("after drain --in us: %s, want %s", got, want)
	}
	// One cluster given: it is the one, --in not needed.
	r = runOK(t, "weight", "user", "user-1", "50", "--cluster", "eu="+eu.endpoint)
	if want := "weight user/user-1 in cluster eu: done, weight 100 -> 50\n"; r.stdout != want {
		t.Fatalf("weight with one --cluster printed %q, want %q", r.stdout, want)
	}
	runOK(t, append([]string{"undrain", "user", "user-1", "--in", "us"}, both...)...)
	if got, want := weights(), "10.0.0.1:9000=50 10.1.0.1:9000=100"; got != want {
		t.Fatalf("after weight in eu and undrain in us: %s, want %s", got, want)
	}
	// Settings too are per cluster.
	runOK(t, append([]string{"policy", "user", "set", "timeout=800ms", "--in", "eu"}, both...)...)
	runOK(t, append([]string{"canary", "user", "blue", "5", "--in", "us"}, both...)...)
	if r := runOK(t, append([]string{"policy", "user", "--in", "us"}, both...)...); strings.Contains(r.stdout, "800ms") {
		t.Fatalf("us's policy after a set in eu:\n%s", r.stdout)
	}
	if r := runOK(t, append([]string{"policy", "user", "--in", "eu"}, both...)...); !strings.Contains(r.stdout, "800ms") {
		t.Fatalf("eu's policy after a set in eu:\n%s", r.stdout)
	}
	if r := runOK(t, "canary", "user", "--cluster", "eu="+eu.endpoint); strings.Contains(r.stdout, "blue") {
		t.Fatalf("eu's canary after a set in us:\n%s", r.stdout)
	}
	if r := runOK(t, "canary", "user", "--cluster", "us="+us.endpoint); !strings.Contains(r.stdout, "blue") {
		t.Fatalf("us's canary after a set in us:\n%s", r.stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"policy", "user", "set", "timeout=1s"}, both...), "2 clusters are given (eu, us)"},
		{append([]string{"drain", "user", "user-1", "--in", "asia"}, both...), "--in asia: no --cluster of that name; given: eu, us"},
		{[]string{"drain", "user", "user-1", "--in", "eu", "--endpoints", eu.endpoint}, "--in eu: names one of the --cluster values, and none is given"},
		{append([]string{"deregister", "user", "user-1"}, both...), "2 clusters are given (eu, us)"},
	} {
		if r := run(tc.args...); r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("muster %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), r.code, r.stderr, exitUsage, tc.want)
		}
	}
}

// muster console --cluster serves a console over the clusters: the
// services page names each cluster with its health, the union's instances
// carry their clusters, and /prometheus/sd lists both clusters' targets.
// serve --console-cluster does the same beside its own registry.
func TestConsoleClusters(t *testing.T) {
	eu, us := startServe(t, t.TempDir()), startServe(t, t.TempDir())
	metrics := map[string]string{promsd.MetadataKey: ":9100"}
	register(t, newRegistrar(t, eu.endpoint), registry.Instance{ID: "user-1", Name: "user", Addr: "10.0.0.1:9000", Metadata: metrics})
	register(t, newRegistrar(t, us.endpoint), registry.Instance{ID: "user-1", Name: "user", Addr: "10.1.0.1:9000", Metadata: metrics})

	o := consoleOptions{listen: "127.0.0.1:0"}
	o.clusters.values = []string{"eu=" + eu.endpoint, "us=" + us.endpoint}
	url := startConsole(t, "http://127.0.0.1:1", o)
	wantHealth(t, url, "eu=fresh us=fresh")
	waitSDTargets(t, strings.TrimSuffix(url, consolePath)+prometheusSDPath, "10.0.0.1:9100", "10.1.0.1:9100")

	urls := freeLoopbackURLs(t, 3)
	so := serveOptions{dataDir: t.TempDir(), clientURL: urls[0], peerURL: urls[1], name: "test",
		metricsAddr: strings.TrimPrefix(urls[2], "http://")}
	so.console.ownName = "local"
	so.console.clusters.values = []string{"eu=" + eu.endpoint}
	s, err := tryServe(t, so)
	if err != nil {
		t.Fatalf("serve did not start: %v", err)
	}
	register(t, newRegistrar(t, s.endpoint), registry.Instance{ID: "user-1", Name: "user", Addr: "10.2.0.1:9000", Metadata: metrics})
	wantHealth(t, urls[2]+consolePath, "eu=fresh local=fresh")
	waitSDTargets(t, urls[2]+prometheusSDPath, "10.0.0.1:9100", "10.2.0.1:9100")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--console-cluster", "local=http://127.0.0.1:1"}, "--console-cluster local: the name is this server's own registry's"},
		{[]string{"serve", "--console-cluster", "eu=http://127.0.0.1:1", "--console-cluster-name", ""}, "--console-cluster-name: empty cluster name"},
		{[]string{"serve", "--console-cluster", "eu=http://127.0.0.1:1,cert=c.pem"}, "--cluster eu: --cert and --key go together"},
		{[]string{"serve", "--console-cluster", "eu=http://127.0.0.1:1", "--metrics-listen", ""}, "need --metrics-listen"},
		{[]string{"console", "--cluster", "eu=http://127.0.0.1:1", "--cluster", "eu=http://127.0.0.1:2"}, `the name "eu" is used twice`},
	} {
		if r := run(tc.args...); r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("muster %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), r.code, r.stderr, exitUsage, tc.want)
		}
	}
}

// wantHealth waits until the services page of the console at url tells
// the clusters' health as want ("eu=fresh us=fresh").
func wantHealth(t *testing.T, url, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var last string
	for ev := range ssetest.Open(ctx, t, url+"api/services/events", nil) {
		var st struct {
			Clusters []struct{ Name, State string }
		}
		if err := json.Unmarshal([]byte(ev.Data), &st); err != nil {
			continue
		}
		var parts []string
		for _, c := range st.Clusters {
			parts = append(parts, c.Name+"="+c.State)
		}
		if last = strings.Join(parts, " "); last == want {
			return
		}
	}
	t.Fatalf("the console at %s: clusters %q, want %q", url, last, want)
}
