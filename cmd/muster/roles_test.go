package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/ssetest"
	"github.com/musterhq/muster/internal/testkit/syncbuf"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/resolver"
)

// recipeUsers are the users docs/SECURITY.md's recipe creates; the recipe
// reads the password of each from NAME_PASSWORD (user-svc:
// USER_SVC_PASSWORD).
var recipeUsers = []string{"root", "user-svc", "gateway", "auditor", "viewer", "ops"}

// passwordOf is the password the tests give user.
func passwordOf(user string) string { return user + "-pw" }

// refusal matches what a process prints when etcd refuses it a read or a
// write: etcd's error, or ls's note on a canary it may not read.
var refusal = regexp.MustCompile(`permission denied|may not read`)

// TestRoles runs docs/SECURITY.md's recipe ("Per-service isolation") as
// written on an etcd with TLS and no authentication yet, then runs every
// Muster process of the section's table under its documented user until it
// has done its reads and watches and followed the operators' changes, with
// no refusal in its output; then checks what each role may not do. It
// runs on the embedded etcd and on each server of etcdtest.BinariesEnv;
// under CI=true, Debian's 3.4 must be one.
func TestRoles(t *testing.T) {
	requireEtcdctl(t)
	recipe := isolationRecipe(t)
	t.Run("embedded", func(t *testing.T) { testRoles(t, recipe) })
	debian := false
	for _, bin := range etcdtest.Binaries() {
		v, err := etcdtest.BinaryVersion(bin)
		if err != nil {
			t.Fatalf("%s: %v", etcdtest.BinariesEnv, err)
		}
		debian = debian || strings.HasPrefix(v, "3.4.")
		t.Run("etcd-"+v, func(t *testing.T) { testRoles(t, recipe, etcdtest.WithBinary(bin)) })
	}
	if !debian && os.Getenv("CI") == "true" {
		t.Fatalf("no etcd 3.4 in %s (.ci/run installs Debian's)", etcdtest.BinariesEnv)
	}
}

// requireEtcdctl skips t when etcdctl (Debian's etcd-client) is not on
// PATH, or fails it when the environment variable CI is "true".
func requireEtcdctl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("etcdctl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI must run the recipe (.ci/run installs Debian's etcd-client)", err)
		}
		t.Skipf("%v; skipping the recipe's test (install Debian's etcd-client)", err)
	}
}

// securitySection returns docs/SECURITY.md's section heading (its
// subsections included).
func securitySection(t *testing.T, heading string) string {
	t.Helper()
	data, err := os.ReadFile("../../docs/SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf(`docs/SECURITY.md has no section "## %s"`, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// securityBlocks returns the shell blocks (```sh) of docs/SECURITY.md's
// section heading (its subsections included), in order.
func securityBlocks(t *testing.T, heading string) []string {
	t.Helper()
	section := securitySection(t, heading)
	var blocks []string
	for {
		_, rest, ok := strings.Cut(section, "\n```sh\n")
		if !ok {
			break
		}
		block, after, ok := strings.Cut(rest, "\n```\n")
		if !ok {
			t.Fatalf(`docs/SECURITY.md, "%s": a sh block does not end`, heading)
		}
		blocks = append(blocks, block)
		section = "\n" + after
	}
	return blocks
}

// isolationRecipe returns the shell blocks of docs/SECURITY.md's section
// "Per-service isolation", in order, as one script.
func isolationRecipe(t *testing.T) string {
	t.Helper()
	recipe := strings.Join(securityBlocks(t, "Per-service isolation"), "\n")
	if lines := strings.Split(strings.TrimSpace(recipe), "\n"); lines[len(lines)-1] != "etcdctl auth enable" {
		t.Fatalf(`docs/SECURITY.md, "Per-service isolation": the recipe ends with %q, want "etcdctl auth enable"`, lines[len(lines)-1])
	}
	return recipe + "\n"
}

// roleCluster is an etcd on which the recipe ran.
type roleCluster struct {
	c     *etcdtest.Cluster
	root  *clientv3.Client
	flags []string // --endpoints and the TLS flags
}

// startRecipe starts an etcd with client TLS, runs the recipe on it with
// sh -eu and only the environment the docs name, and returns it with a
// client logged in as root.
func startRecipe(t *testing.T, recipe string, opts ...etcdtest.Option) *roleCluster {
	t.Helper()
	c := etcdtest.Start(t, append([]etcdtest.Option{etcdtest.WithTLS(), etcdtest.WithCheapPasswords()}, opts...)...)
	f := c.TLS()
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"ETCDCTL_ENDPOINTS=" + c.Endpoints()[0],
		"ETCDCTL_CACERT=" + f.CAFile, "ETCDCTL_CERT=" + f.CertFile, "ETCDCTL_KEY=" + f.KeyFile,
	}
	for _, u := range recipeUsers {
		env = append(env, strings.ToUpper(strings.ReplaceAll(u, "-", "_"))+"_PASSWORD="+passwordOf(u))
	}
	cmd := exec.Command("sh", "-eux", "-c", recipe)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the recipe of docs/SECURITY.md failed: %v\n%s", err, out)
	}
	return &roleCluster{
		c:     c,
		root:  c.UserClient(t, etcdtest.RootUser, passwordOf(etcdtest.RootUser)),
		flags: []string{"--endpoints", c.Endpoints()[0], "--cacert", f.CAFile, "--cert", f.CertFile, "--key", f.KeyFile},
	}
}

// as returns the command line args run as user.
func (rc *roleCluster) as(user string, args ...string) []string {
	return append(append(slices.Clip(args), rc.flags...), "--user", user+":"+passwordOf(user))
}

// run runs args as user, fails t unless it succeeds, and checks that
// nothing was refused.
func (rc *roleCluster) run(t *testing.T, user string, args ...string) result {
	t.Helper()
	r := runOK(t, rc.as(user, args...)...)
	noRefusal(t, "muster "+strings.Join(args, " ")+" as "+user, r.stdout+r.stderr)
	return r
}

// noRefusal fails t if out, what a process printed, says that etcd
// refused it something.
func noRefusal(t *testing.T, who, out string) {
	t.Helper()
	if refusal.MatchString(out) {
		t.Errorf("%s was refused a read or a write:\n%s", who, out)
	}
}

// testRoles is TestRoles on one etcd server (opts).
func testRoles(t *testing.T, recipe string, opts ...etcdtest.Option) {
	rc := startRecipe(t, recipe, opts...)
	userBE, base, blue := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	reg, err := etcd.NewRegistrar(rc.root, etcd.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	register(t, reg, registry.Instance{Name: "order", ID: "base", Addr: base.Addr})
	register(t, reg, registry.Instance{Name: "order", ID: "blue", Addr: blue.Addr, Metadata: map[string]string{"color": "blue"}})

	// The user service's sidecar, its client of order, the control plane
	// and a person watching order.
	side := startReading(t, true, rc.as("user-svc", "register", "--name", "user", "--id", "user-1", "--addr", userBE.Addr)...)
	awaitLine(t, side, `msg=registered`)
	client, clientLog := rc.dialOrder(t, "user-svc")
	callsOnlyOn(t, client, base.Addr, "the client's uncolored calls")
	cp := startReading(t, true, rc.as("gateway", "xds", "--listen", "127.0.0.1:0")...)
	xdsConns := dialXDS(t, awaitMatch(t, cp, `xds control plane serving ADS on ([^\s"]+)`), "user", "order")
	xdsUser, xdsOrder := xdsConns[0], xdsConns[1]
	if got := callWhenReady(t, xdsUser); got != userBE.Addr {
		t.Fatalf("a call to user through xDS was served by %s, want %s", got, userBE.Addr)
	}
	callsOnlyOn(t, xdsOrder, base.Addr, "uncolored calls through xDS")
	w := start(t, rc.as("viewer", "watch", "order")...)
	w.expectWatch(t, `# order: 2 instances at revision \d+; watching for changes`)
	w.expectWatch(t, `= base .*`)
	w.expectWatch(t, `= blue .*`)

	// An operator's settings reach the watch, the client and the control
	// plane.
	rc.run(t, "ops", "canary", "order", "blue", "100")
	expectChange(t, w, `% canary 100% of uncolored calls to blue`)
	callsOnlyOn(t, client, blue.Addr, "the client's calls after the canary")
	callsOnlyOn(t, xdsOrder, blue.Addr, "calls through xDS after the canary")
	rc.run(t, "ops", "policy", "order", "set", "timeout=200ms")
	blue.SetDelay(3 * time.Second)
	awaitPolicyTimeout(t, client, "the client")
	awaitPolicyTimeout(t, xdsOrder, "xDS")
	blue.SetDelay(0)

	// The operator commands, seen by the watch with their overrides.
	rc.run(t, "ops", "drain", "order", "base")
	expectChange(t, w, `~ base \S+ \(weight 100->0 by override\)`)
	rc.run(t, "ops", "weight", "order", "base", "50")
	expectChange(t, w, `~ base \S+ \(weight 0->50 by override\)`)
	rc.run(t, "ops", "undrain", "order", "base")
	expectChange(t, w, `~ base \S+ \(weight 50->100, override removed\)`)
	rc.run(t, "ops", "canary", "order")
	rc.run(t, "ops", "policy", "order")
	// A deregistered instance comes back: the sidecar watches its prefix.
	userKey := registry.Key(registry.DefaultPrefix, "user", "user-1")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	events := rc.root.Watch(ctx, userKey)
	rc.run(t, "ops", "deregister", "user", "user-1")
	awaitKeyEvents(t, events, userKey, mvccpb.DELETE, mvccpb.PUT)

	// The consoles: an operator's drains from one; both show the service
	// with its settings, journal, overrides and leases.
	admin := startRoleConsole(t, rc, "ops", "--console-admin-token-file", tokenFile(t))
	consoleDrain(t, admin, "order", "base")
	expectChange(t, w, `~ base \S+ \(weight 100->0 by override\)`)
	viewer := startRoleConsole(t, rc, "viewer")
	for _, url := range []string{admin.url, viewer.url} {
		awaitConsoleShowsOrder(t, url)
	}

	// The read commands as a person reading, and the journal as an
	// auditor.
	if r := rc.run(t, "viewer", "ls"); !regexp.MustCompile(`(?m)^order +2 +100% blue$`).MatchString(r.stdout) {
		t.Errorf("ls as viewer:\n%s", r.stdout)
	}
	if r := rc.run(t, "viewer", "ls", "order"); !strings.Contains(r.stdout, "canary: 100% of uncolored calls to blue") ||
		!strings.Contains(r.stdout, "policy: ") {
		t.Errorf("ls order as viewer, without its canary or policy:\n%s", r.stdout)
	}
	rc.run(t, "viewer", "get", "order", "base")
	rc.run(t, "viewer", "history")
	for _, user := range []string{"viewer", "auditor"} {
		r := rc.run(t, user, "history", "order")
		for _, action := range []string{"canary", "policy", "drain", "weight", "undrain"} {
			if !regexp.MustCompile(`(?m)^\S+ +ops +command +` + action + ` `).MatchString(r.stdout) {
				t.Errorf("history order as %s lacks the operator's %s:\n%s", user, action, r.stdout)
			}
		}
		if !regexp.MustCompile(`(?m) console +drain +base `).MatchString(r.stdout) {
			t.Errorf("history order as %s lacks the console's drain:\n%s", user, r.stdout)
		}
	}

	checkRoleRefusals(t, rc)

	// Every process stops cleanly, the sidecar revoking its lease, and
	// none was refused anything.
	for _, p := range []struct {
		name string
		b    *background
	}{{"watch as viewer", w}, {"console as ops", admin.b}, {"console as viewer", viewer.b}, {"xds as gateway", cp}} {
		if code := p.b.stop(t); code != exitOK {
			t.Errorf("muster %s: exit code %d; stderr:\n%s", p.name, code, p.b.stderr)
		}
		noRefusal(t, "muster "+p.name, strings.Join(p.b.seen, "\n")+"\n"+p.b.stderr.String())
	}
	if code := side.stop(t); code != exitOK || !strings.Contains(side.stderr.String(), "deregistered on exit") {
		t.Errorf("the sidecar: exit code %d, want 0 and deregistered on exit; stderr:\n%s", code, side.stderr)
	}
	noRefusal(t, "the sidecar", side.stderr.String())
	noRefusal(t, "the client of order", clientLog.String())
}

// dialOrder returns a channel to muster:///order as a Go service's client
// logged in as user has one (a Discovery, the canaries and the policies
// followed, Muster's balancer), and the log of its etcd client, Discovery,
// settings and resolver, at debug level.
func (rc *roleCluster) dialOrder(t *testing.T, user string) (*grpc.ClientConn, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := etcd.ClientConfig(rc.c.Endpoints()...)
	cfg.TLS = rc.c.TLS().ClientTLS()
	cfg.Username, cfg.Password = user, passwordOf(user)
	cfg.Logger = etcd.ClientLogger(log)
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	disc, err := etcd.NewDiscovery(cli, etcd.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disc.Close() })
	canaries, err := etcd.NewCanaries(cli, etcd.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	policies, err := etcd.NewPolicies(cli, etcd.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	b, err := resolver.New(disc, resolver.WithCanaries(canaries), resolver.WithPolicies(policies),
		resolver.WithPolicyServiceConfig(`[{"muster_p2c":{}}]`), resolver.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("muster:///order", grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, logs
}

// dialXDS returns a channel to xds:///<service> for each service, through
// the control plane at addr, with the bootstrap muster xds-bootstrap
// writes.
func dialXDS(t *testing.T, addr string, services ...string) (conns []*grpc.ClientConn) {
	t.Helper()
	bootstrap := runOK(t, "xds-bootstrap", "--server", addr, "--node-id", "roles").stdout
	b, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range services {
		conn, err := grpc.NewClient("xds:///"+s, grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns = append(conns, conn)
	}
	return conns
}

// callWhenReady makes one call on conn, waiting until the channel is
// ready, and returns the address that served it.
func callWhenReady(t *testing.T, conn *grpc.ClientConn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	got, err := testbackend.Call(ctx, conn, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("call through %s: %v", conn.Target(), err)
	}
	return got
}

// staleOrFresh matches the lines of a watch that went stale and fresh
// again: on a loaded machine etcd may take longer to create a watch than
// the tests' progress interval allows.
var staleOrFresh = regexp.MustCompile("^" + watchTime + "! (stale since|fresh again) ")

// expectChange is expectWatch for the next line of a change, after any
// lines of staleness.
func expectChange(t *testing.T, w *background, re string) {
	t.Helper()
	for {
		line := w.next(t, fmt.Sprintf("a line matching %q", re))
		if staleOrFresh.MatchString(line) {
			continue
		}
		if !regexp.MustCompile("^" + watchTime + "(?:" + re + ")$").MatchString(line) {
			t.Fatalf("got line %q, want one matching %q; lines so far:\n%s", line, re, strings.Join(w.seen, "\n"))
		}
		return
	}
}

// awaitMatch reads b's lines until one matches re and returns re's first
// group in it.
func awaitMatch(t *testing.T, b *background, re string) string {
	t.Helper()
	return regexp.MustCompile(re).FindStringSubmatch(awaitLine(t, b, re))[1]
}

// callsOnlyOn makes calls on conn until 30 in a row are served by addr.
func callsOnlyOn(t *testing.T, conn *grpc.ClientConn, addr, what string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var last string
	for inRow := 0; inRow < 30; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not all on %s within %v; the last was %s", what, addr, waitTimeout, last)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := testbackend.Call(ctx, conn, grpc.WaitForReady(true))
		cancel()
		if last = got; err != nil {
			last = err.Error()
		}
		if last == addr {
			inRow++
		} else {
			inRow = 0
		}
	}
}

// awaitPolicyTimeout makes calls on conn, to a backend that answers after
// 3 s, until one fails with DEADLINE_EXCEEDED well before: the policy's
// timeout of 200 ms applies.
func awaitPolicyTimeout(t *testing.T, conn *grpc.ClientConn, what string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		began := time.Now()
		_, err := testbackend.Call(ctx, conn)
		took := time.Since(began)
		cancel()
		if status.Code(err) == codes.DeadlineExceeded && took < 2*time.Second {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no call ended by the policy's 200 ms timeout within %v; the last: %v after %v", what, waitTimeout, err, took)
		}
	}
}

// awaitKeyEvents reads events until it has seen, on key, the event types
// want in order.
func awaitKeyEvents(t *testing.T, events clientv3.WatchChan, key string, want ...mvccpb.Event_EventType) {
	t.Helper()
	var seen []mvccpb.Event_EventType
	for resp := range events {
		for _, ev := range resp.Events {
			if string(ev.Kv.Key) == key {
				seen = append(seen, ev.Type)
			}
		}
		if len(seen) >= len(want) {
			break
		}
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("events on %s: %v, want %v", key, seen, want)
	}
}

// roleConsole is a muster console running as a user.
type roleConsole struct {
	b   *background
	url string
}

// startRoleConsole runs muster console as user, with extra flags, until
// the end of the test.
func startRoleConsole(t *testing.T, rc *roleCluster, user string, extra ...string) roleConsole {
	t.Helper()
	b := startReading(t, true, rc.as(user, append([]string{"console", "--listen", "127.0.0.1:0"}, extra...)...)...)
	return roleConsole{b: b, url: awaitMatch(t, b, `console on (http://\S+/ui/)`)}
}

// consoleDrain logs in to the console with the admin token and drains the
// instance.
func consoleDrain(t *testing.T, c roleConsole, service, id string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Jar: jar, Timeout: waitTimeout}
	code, body := post(t, hc, c.url+"api/login", "", map[string]string{"token": consoleToken})
	var sess struct{ CSRF string }
	if err := json.Unmarshal([]byte(body), &sess); code != http.StatusOK || err != nil {
		t.Fatalf("console login: status %d, body %q", code, body)
	}
	drain := map[string]any{"action": "drain", "service": service, "ids": []string{id}}
	if code, body := post(t, hc, c.url+"api/action", sess.CSRF, drain); code != http.StatusOK || !strings.Contains(body, `"done":1`) {
		t.Fatalf("drain from the console: status %d, body %q", code, body)
	}
}

// consoleService is what the tests read of a console's service page.
type consoleService struct {
	Instances []struct {
		ID           string
		Override     bool
		LeaseExpires *time.Time
	}
	Canary  *registry.Canary
	Policy  json.RawMessage
	History []struct{ Source, Action, Instance string }
}

// awaitConsoleShowsOrder follows the service page of order at the console
// url until it shows all it reads: every instance's lease, base's
// override, the canary, the policy and the console's drain in the journal.
func awaitConsoleShowsOrder(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var last string
	for ev := range ssetest.Open(ctx, t, url+"api/service/events?name=order", nil) {
		if ev.Name != "state" {
			continue
		}
		last = ev.Data
		var s consoleService
		if err := json.Unmarshal([]byte(ev.Data), &s); err != nil {
			t.Fatalf("the console's state of order: %v\n%s", err, ev.Data)
		}
		if s.shows() {
			return
		}
	}
	t.Fatalf("the console at %s did not show order with its leases, override, canary, policy and journal within %v; last state:\n%s",
		url, waitTimeout, last)
}

func (s consoleService) shows() bool {
	if len(s.Instances) != 2 || s.Canary == nil || *s.Canary != (registry.Canary{Color: "blue", Percent: 100}) || len(s.Policy) == 0 {
		return false
	}
	for _, in := range s.Instances {
		if in.LeaseExpires == nil || in.Override != (in.ID == "base") {
			return false
		}
	}
	return slices.ContainsFunc(s.History, func(r struct{ Source, Action, Instance string }) bool {
		return r.Source == registry.SourceConsole && r.Action == registry.ActionDrain && r.Instance == "base"
	})
}

// checkRoleRefusals checks what each role may not do: user-svc register
// order or write the journal, gateway register, auditor drain.
func checkRoleRefusals(t *testing.T, rc *roleCluster) {
	t.Helper()
	for _, c := range []struct{ user, service string }{{"user-svc", "order"}, {"gateway", "user"}} {
		key := registry.Key(registry.DefaultPrefix, c.service, "intruder")
		side := startReading(t, true, rc.as(c.user, "register", "--name", c.service, "--id", "intruder", "--addr", "127.0.0.1:9")...)
		awaitLine(t, side, `level=ERROR msg="cannot register" .*`+regexp.QuoteMeta("etcd: put "+key+": etcdserver: permission denied"))
		side.stop(t)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		resp, err := rc.root.Get(ctx, key)
		cancel()
		if err != nil || len(resp.Kvs) != 0 {
			t.Errorf("%s registering %s: %s holds %v (%v), want nothing", c.user, c.service, key, resp, err)
		}
	}
	// The refusal of a write names the journal, which user-svc may not
	// write although it may change the instance.
	r := run(rc.as("user-svc", "drain", "user", "user-1")...)
	if journal := registry.JournalSeqKey(registry.DefaultPrefix, "user"); r.code != exitFailure ||
		!strings.Contains(r.stderr, journal) || !strings.Contains(r.stderr, "etcdserver: permission denied") {
		t.Errorf("drain as user-svc: exit code %d, stderr %q; want 1 and a permission error naming %s", r.code, r.stderr, journal)
	}
	r = run(rc.as("auditor", "drain", "order", "blue")...)
	if r.code != exitFailure || !strings.Contains(r.stderr, "etcdserver: permission denied") {
		t.Errorf("drain as auditor: exit code %d, stderr %q; want 1 and a permission error", r.code, r.stderr)
	}
}
