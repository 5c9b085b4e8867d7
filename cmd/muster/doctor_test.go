package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// doctorRun is one run of muster doctor: its exit code, table and
// findings (read from the same checks' JSON).
type doctorRun struct {
	code  int
	table string
	fs    findings
}

// runDoctorAs runs muster doctor as user on rc with args, twice: as a
// table and as JSON. A flag of rc's (--endpoints, --cert...) in args
// replaces rc's value.
func runDoctorAs(t *testing.T, rc *roleCluster, user string, args ...string) doctorRun {
	t.Helper()
	args = append([]string{"doctor"}, args...)
	for i := 0; i+1 < len(rc.flags); i += 2 {
		if !slices.Contains(args, rc.flags[i]) {
			args = append(args, rc.flags[i], rc.flags[i+1])
		}
	}
	args = append(args, "--user", user+":"+passwordOf(user))
	table := run(args...)
	js := run(append(args, "-o", "json")...)
	var out struct {
		Checks  findings `json:"checks"`
		Verdict string   `json:"verdict"`
	}
	if err := json.Unmarshal([]byte(js.stdout), &out); err != nil {
		t.Fatalf("muster %s -o json: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, js.stdout, js.stderr)
	}
	if js.code != table.code {
		t.Fatalf("muster %s: exit code %d as a table, %d as JSON", strings.Join(args, " "), table.code, js.code)
	}
	return doctorRun{code: table.code, table: table.stdout + table.stderr, fs: out.Checks}
}

// find returns the findings of check whose target contains target.
func (d doctorRun) find(check, target string) []finding {
	var out []finding
	for _, f := range d.fs {
		if f.Check == check && strings.Contains(f.Target, target) {
			out = append(out, f)
		}
	}
	return out
}

// expect fails t unless there is exactly one finding of check whose target
// contains target, with result and a detail matching detail.
func (d doctorRun) expect(t *testing.T, check, target, result, detail string) {
	t.Helper()
	got := d.find(check, target)
	if len(got) != 1 {
		t.Fatalf("%d findings %s %q, want 1; output:\n%s", len(got), check, target, d.table)
	}
	if got[0].Result != result || !regexp.MustCompile(detail).MatchString(got[0].Detail) {
		t.Fatalf("%s %s: %s %q, want %s matching %q; output:\n%s", check, target, got[0].Result, got[0].Detail, result, detail, d.table)
	}
}

// allOK fails t unless d exited 0 with every finding ok.
func (d doctorRun) allOK(t *testing.T) {
	t.Helper()
	if d.code != exitOK || slices.ContainsFunc(d.fs, func(f finding) bool { return f.Result != checkOK }) {
		t.Fatalf("doctor: exit code %d, want every check ok and 0:\n%s", d.code, d.table)
	}
}

// closedAddr returns a loopback host:port nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	return strings.TrimPrefix(deadEndpoint(t), "http://")
}

// TestDoctor runs muster doctor on a deployment set up by
// docs/SECURITY.md's recipe (etcd 3.7 with TLS and passwords, muster xds
// as gateway): every check ok; then the same deployment seen with a dead
// etcd endpoint, a user missing permissions, a dead xDS replica and a
// health URL that does not exist, each its own line.
func TestDoctor(t *testing.T) {
	requireEtcdctl(t)
	rc := startRecipe(t, isolationRecipe(t))
	be := testbackend.Start(t)
	reg := newRootRegistrar(t, rc)
	register(t, reg, registry.Instance{Name: "order", ID: "base", Addr: be.Addr})
	register(t, reg, registry.Instance{Name: "order", ID: "blue", Addr: be.Addr})
	cp := startReading(t, true, rc.as("gateway", "xds", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")...)
	xdsAt := awaitMatch(t, cp, `xds control plane serving ADS on ([^\s"]+)`)
	metricsAt := waitLogged(t, cp.stderr, `metrics on http://([0-9.:]+)/metrics`)

	healthy := runDoctorAs(t, rc, "gateway", "--role", "xds", "--xds", xdsAt,
		"--xds-health", "http://"+metricsAt+"/healthz", "--cert-warn", "1h")
	t.Logf("a healthy deployment:\n%s", healthy.table)
	healthy.allOK(t)
	healthy.expect(t, "etcd", rc.c.Endpoints()[0], checkOK, `^etcd 3\.7\.\d+, leader`)
	healthy.expect(t, "auth", "etcd", checkOK, `password of user gateway`)
	for _, p := range []string{"/muster/services/", "/muster/services.canary/", "/muster/services.policy/"} {
		healthy.expect(t, "permission", "prefix "+p, checkOK, `^read$`)
	}
	healthy.expect(t, "cert", "--cacert", checkOK, `valid until`)
	healthy.expect(t, "cert", "served by "+rc.c.Endpoints()[0], checkOK, `"etcdtest server" valid until`)
	healthy.expect(t, "xds", xdsAt, checkOK, `ADS answered in .*: 1 listener, 1 cluster`)
	healthy.expect(t, "health", metricsAt, checkOK, `^200 OK`)
	healthy.expect(t, "registry", "/muster/services/", checkOK, `^1 service, 2 instances, 1 lease \(etcd holds \d+ in all\)$`)

	dead, deadXDS := deadEndpoint(t), closedAddr(t)
	broken := runDoctorAs(t, rc, "gateway", "--role", "operator", "--cert-warn", "1h", "--timeout", "2s",
		"--endpoints", rc.c.Endpoints()[0]+","+strings.Replace(dead, "http://", "https://", 1),
		"--xds", xdsAt, "--xds", deadXDS, "--xds-health", "http://"+metricsAt+"/no-such-path")
	t.Logf("a broken deployment:\n%s", broken.table)
	if broken.code != exitFailure || !strings.Contains(broken.table, "verdict: fail") {
		t.Fatalf("doctor on a broken deployment: exit code %d, want %d and the verdict fail:\n%s", broken.code, exitFailure, broken.table)
	}
	broken.expect(t, "etcd", rc.c.Endpoints()[0], checkOK, `^etcd 3\.7`)
	broken.expect(t, "etcd", strings.TrimPrefix(dead, "http://"), checkFail, `^no answer within 2s; connecting: dial tcp \S+: connect: connection refused$`)
	for _, p := range []string{"/muster/services/", "/muster/services.canary/", "/muster/services.policy/"} {
		broken.expect(t, "permission", "prefix "+p, checkFail, `^write: etcdserver: permission denied$`)
	}
	broken.expect(t, "permission", "prefix /muster/services.history/", checkFail, `^read: etcdserver: permission denied$`)
	broken.expect(t, "xds", xdsAt, checkOK, `ADS answered`)
	broken.expect(t, "xds", deadXDS, checkFail, `no answer within|connection refused`)
	broken.expect(t, "health", metricsAt, checkWarn, `^404 Not Found: no readiness endpoint`)
}

// newRootRegistrar returns a Registrar logged in as root on rc.
func newRootRegistrar(t *testing.T, rc *roleCluster) registry.Registrar {
	t.Helper()
	r, err := etcd.NewRegistrar(rc.root, etcd.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestDoctorRoles checks each role's permissions as the recipe's users
// have them, on etcd 3.7 (embedded) and each server of
// etcdtest.BinariesEnv (Debian's 3.4 among them in CI): a write is checked
// without writing anything (the revision stays), and a prefix the user
// may read but not write fails naming the prefix and the write.
func TestDoctorRoles(t *testing.T) {
	requireEtcdctl(t)
	recipe := isolationRecipe(t)
	t.Run("embedded", func(t *testing.T) { testDoctorRoles(t, recipe, `^etcd 3\.7\.`, checkOK) })
	for _, bin := range etcdtest.Binaries() {
		v, err := etcdtest.BinaryVersion(bin)
		if err != nil {
			t.Fatal(err)
		}
		auth := checkOK
		if strings.HasPrefix(v, "3.4.") {
			auth = checkWarn
		}
		t.Run("etcd-"+v, func(t *testing.T) {
			testDoctorRoles(t, recipe, "^etcd "+regexp.QuoteMeta(v)+",", auth, etcdtest.WithBinary(bin))
		})
	}
}

func testDoctorRoles(t *testing.T, recipe, version, auth string, opts ...etcdtest.Option) {
	rc := startRecipe(t, recipe, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	revision := func() int64 {
		resp, err := rc.root.Get(ctx, "any")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}

	before := revision()
	ops := runDoctorAs(t, rc, "ops", "--role", "operator", "--cert-warn", "1h")
	sidecar := runDoctorAs(t, rc, "user-svc", "--role", "register", "--service", "user", "--cert-warn", "1h")
	if after := revision(); after != before {
		t.Fatalf("doctor changed etcd: revision %d before, %d after", before, after)
	}
	t.Logf("operator:\n%s\nregister:\n%s", ops.table, sidecar.table)
	for _, d := range []doctorRun{ops, sidecar} {
		d.expect(t, "etcd", rc.c.Endpoints()[0], checkOK, version)
		d.expect(t, "auth", "etcd", auth, `password of user`)
		if d.code != exitOK || slices.ContainsFunc(d.fs, func(f finding) bool { return f.Result == checkFail }) {
			t.Fatalf("doctor: exit code %d, want no failure and 0:\n%s", d.code, d.table)
		}
	}
	if auth == checkWarn {
		ops.expect(t, "auth", "etcd", checkWarn, `on etcd 3\.4: .* stays failed after a member restart`)
	}
	for _, p := range []string{"/muster/services/", "/muster/services.canary/", "/muster/services.policy/", "/muster/services.history/"} {
		ops.expect(t, "permission", "prefix "+p, checkOK, `^read, write$`)
	}
	sidecar.expect(t, "permission", "prefix /muster/services/user/", checkOK, `^read, write$`)
	sidecar.expect(t, "lease", "grant", checkOK, `^granted and revoked lease [0-9a-f]+$`)
	sidecar.expect(t, "registry", "/muster/services/user/", checkOK, `^0 services, 0 instances, 0 leases`)

	// user-svc may read order but not write it: the write's line says so.
	other := runDoctorAs(t, rc, "user-svc", "--role", "register", "--service", "order", "--cert-warn", "1h")
	if other.code != exitFailure {
		t.Fatalf("doctor: exit code %d, want %d:\n%s", other.code, exitFailure, other.table)
	}
	other.expect(t, "permission", "prefix /muster/services/order/", checkFail, `^write: etcdserver: permission denied$`)
	// As a client of its own service, user-svc lacks the read of its
	// canary and policy keys (the recipe grants order's).
	client := runDoctorAs(t, rc, "user-svc", "--role", "client", "--service", "user", "--cert-warn", "1h")
	client.expect(t, "permission", "prefix /muster/services/user/", checkOK, `^read$`)
	client.expect(t, "permission", "key /muster/services.canary/user", checkFail, `^read: etcdserver: permission denied$`)
	client.expect(t, "permission", "key /muster/services.policy/user", checkFail, `^read: etcdserver: permission denied$`)
}

// TestDoctorCertificates checks the certificate lines: a client
// certificate expiring in 10 days warns (the default --cert-warn is 30
// days), an expired one fails, and so does one not yet valid.
func TestDoctorCertificates(t *testing.T) {
	requireEtcdctl(t)
	rc := startRecipe(t, isolationRecipe(t))
	f := rc.c.TLS()
	now := time.Now()
	for _, c := range []struct {
		name                string
		notBefore, notAfter time.Time
		code                int
		result, detail      string
	}{
		{"expiring", now.Add(-time.Hour), now.Add(10*24*time.Hour + time.Hour), exitOK, checkWarn, `^"doctor" expires on \S+, in 10 days$`},
		{"expired", now.Add(-48 * time.Hour), now.Add(-24*time.Hour - time.Hour), exitFailure, checkFail, `^"doctor" expired on \S+ \(25 hours ago\)$`},
		{"not yet valid", now.Add(24 * time.Hour), now.Add(48 * time.Hour), exitFailure, checkFail, `^"doctor" is not valid before `},
	} {
		t.Run(c.name, func(t *testing.T) {
			cert, key := f.IssueClient(t, "doctor", c.notBefore, c.notAfter)
			d := runDoctorAs(t, rc, "gateway", "--cert", cert, "--key", key, "--timeout", "2s")
			t.Logf("\n%s", d.table)
			if d.code != c.code {
				t.Fatalf("exit code %d, want %d:\n%s", d.code, c.code, d.table)
			}
			d.expect(t, "cert", "--cert "+cert, c.result, c.detail)
			if c.result == checkFail {
				d.expect(t, "etcd", rc.c.Endpoints()[0], checkFail, `^no answer within 2s; connecting: remote error: tls: (expired|bad) certificate$`)
			}
			// The generated CA and server certificate are valid for a
			// day: within 30 days.
			d.expect(t, "cert", "--cacert", checkWarn, `in 2[34] hours$`)
		})
	}
}

// TestDoctorFlags checks the usage errors of doctor's own flags.
func TestDoctorFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--role", "admin"}, `--role: unknown role "admin"`},
		{[]string{"--role", "register"}, `--role register needs --service`},
		{[]string{"--role", "xds", "--service", "user"}, `--service: --role xds is not about one service`},
		{[]string{"--service", "user"}, `--service needs --role register or client`},
		{[]string{"--role", "client", "--service", "Bad_Name"}, `--service: `},
		{[]string{"--xds-cert", "c.pem"}, `--xds-cert and --xds-key go together`},
		{[]string{"--cert-warn", "-1h"}, `--cert-warn: must not be negative`},
		{[]string{"--registry", "zk://127.0.0.1:2181"}, `doctor works on etcd only`},
	} {
		r := run(append([]string{"doctor", "--endpoints", deadEndpoint(t)}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("doctor %v: exit code %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
}

// TestDoctorRoleTable checks that docs/SECURITY.md's table of what each
// --role needs ("Checking a deployment") says what roleNeeds checks.
func TestDoctorRoleTable(t *testing.T) {
	_, section, ok := strings.Cut(securitySection(t, "Checking a deployment"), "What each `--role` needs")
	if !ok {
		t.Fatal(`docs/SECURITY.md, "Checking a deployment": no "What each ` + "`--role`" + ` needs"`)
	}
	for _, role := range []string{"register", "client", "xds", "console", "operator"} {
		needs, lease := roleNeeds(role, registry.DefaultPrefix, "<svc>")
		var parts []string
		for _, n := range needs {
			access := "read"
			if n.write {
				access = "read, write"
			}
			kind := "key"
			if n.prefix {
				kind = "prefix"
			}
			parts = append(parts, fmt.Sprintf("%s on the %s `%s`", access, kind, n.key))
		}
		if lease {
			parts = append(parts, "a lease")
		}
		want := strings.Join(parts, "; ")
		m := regexp.MustCompile("(?m)^\\| `" + role + "` \\|[^|]*\\| ([^|]*) \\|$").FindStringSubmatch(section)
		if m == nil {
			t.Errorf("docs/SECURITY.md, \"Checking a deployment\": no row for --role %s; want its needs to be %q", role, want)
			continue
		}
		if m[1] != want {
			t.Errorf("docs/SECURITY.md, \"Checking a deployment\", --role %s:\n  doc:  %s\n  code: %s", role, m[1], want)
		}
	}
}

// TestDoctorAuthOff checks the auth line of an etcd without
// authentication, on etcd 3.7 (AuthStatus) and Debian's 3.4 (which has no
// AuthStatus: a login tells).
func TestDoctorAuthOff(t *testing.T) {
	servers := map[string][]etcdtest.Option{"embedded": nil}
	for _, bin := range etcdtest.Binaries() {
		if v, _ := etcdtest.BinaryVersion(bin); strings.HasPrefix(v, "3.4.") {
			servers["etcd-"+v] = []etcdtest.Option{etcdtest.WithBinary(bin)}
		}
	}
	for name, opts := range servers {
		t.Run(name, func(t *testing.T) {
			c := etcdtest.Start(t, opts...)
			r := run("doctor", "--endpoints", c.Endpoints()[0], "-o", "json")
			d := doctorRun{code: r.code, table: r.stdout + r.stderr}
			var out struct{ Checks findings }
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
				t.Fatalf("%v:\n%s", err, d.table)
			}
			d.fs = out.Checks
			if d.code != exitOK {
				t.Fatalf("exit code %d, want 0 (a warning is no failure):\n%s", d.code, d.table)
			}
			d.expect(t, "auth", "etcd", checkWarn, `^authentication is off: whoever reaches etcd may write every key`)
		})
	}
}

// TestDoctorXDSTLS checks a control plane serving ADS over TLS with
// client certificates: asked with the CA and a client certificate, it
// answers and its certificate gets a line; without a client certificate,
// it fails.
func TestDoctorXDSTLS(t *testing.T) {
	c := etcdtest.Start(t)
	f := etcdtest.GenerateTLS(t)
	cp := startReading(t, true, "xds", "--endpoints", c.Endpoints()[0], "--listen", "127.0.0.1:0",
		"--xds-cert", f.ServerCertFile, "--xds-key", f.ServerKeyFile, "--xds-cacert", f.CAFile)
	addr := awaitMatch(t, cp, `xds control plane serving ADS on ([^\s"]+)`)
	doctor := func(args ...string) doctorRun {
		r := run(append([]string{"doctor", "--endpoints", c.Endpoints()[0], "--xds", addr, "--timeout", "2s", "--cert-warn", "1h", "-o", "json"}, args...)...)
		var out struct{ Checks findings }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%v:\n%s%s", err, r.stdout, r.stderr)
		}
		return doctorRun{code: r.code, table: r.stdout + r.stderr, fs: out.Checks}
	}
	d := doctor("--xds-cacert", f.CAFile, "--xds-cert", f.CertFile, "--xds-key", f.KeyFile)
	d.expect(t, "xds", addr, checkOK, `^ADS answered in .*: 0 listeners, 0 clusters$`)
	d.expect(t, "cert", "served by "+addr, checkOK, `^"etcdtest server" valid until`)
	d.expect(t, "cert", "--xds-cacert", checkOK, `^"etcdtest CA`)
	d.expect(t, "cert", "--xds-cert", checkOK, `^"etcdtest-client" valid until`)
	if d.code != exitOK {
		t.Fatalf("exit code %d, want 0:\n%s", d.code, d.table)
	}
	d = doctor("--xds-cacert", f.CAFile)
	d.expect(t, "xds", addr, checkFail, `certificate required|broken pipe|connection reset|no answer within`)
}
