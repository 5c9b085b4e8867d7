package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/embedetcd"
	"github.com/musterhq/muster/internal/health"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// quotaRootPassword is root's password in the serve runs of these tests.
const quotaRootPassword = "root-pw"

// authServe runs muster serve with etcd authentication (root's password
// quotaRootPassword), /metrics on a free port and the flags extra, and
// returns it, once ready, with its client endpoint and metrics address.
func authServe(t *testing.T, extra ...string) (serve *background, endpoint, metrics string) {
	t.Helper()
	urls := freeLoopbackURLs(t, 2)
	pw := writeFile(t, "root-password", quotaRootPassword+"\n")
	serve = startReading(t, true, append([]string{"serve", "--data-dir", t.TempDir(), "--listen-client-url", urls[0],
		"--listen-peer-url", urls[1], "--root-password-file", pw, "--metrics-listen", "127.0.0.1:0"}, extra...)...)
	metrics = regexp.MustCompile(`metrics on http://(\S+)/metrics`).FindStringSubmatch(awaitLine(t, serve, `metrics on http://\S+/metrics`))[1]
	endpoint = regexp.MustCompile(`clients use --endpoints (\S+);`).FindStringSubmatch(awaitLine(t, serve, `ready, clients use --endpoints \S+;`))[1]
	return serve, endpoint, metrics
}

// userClient returns a client of endpoint logged in as user, closed at
// the end of the test.
func userClient(t *testing.T, endpoint, user, password string) *clientv3.Client {
	t.Helper()
	cfg := etcd.ClientConfig(endpoint)
	cfg.Username, cfg.Password = user, password
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcd client as %s: %v", user, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// serviceUser creates, as root, the user and role "<svc>-svc" (password
// "<svc>-svc-pw") with read-write on the service's prefix only, as the
// recipe of docs/SECURITY.md does, and returns a client logged in as it.
func serviceUser(t *testing.T, root *clientv3.Client, endpoint, svc string) *clientv3.Client {
	t.Helper()
	user, prefix := svc+"-svc", registry.DefaultPrefix+"/"+svc+"/"
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, user); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, user, user+"-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, user, user); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("set up %s: %v", user, err)
		}
	}
	return userClient(t, endpoint, user, user+"-pw")
}

// registrarOn returns a Registrar on cli, closed at the end of the test.
func registrarOn(t *testing.T, cli *clientv3.Client, opts ...etcd.RegistrarOption) *etcd.Registrar {
	t.Helper()
	r, err := etcd.NewRegistrar(cli, append([]etcd.RegistrarOption{etcd.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// renewedTTL is the lease TTL of the registrars whose renewals the tests
// watch: etcd reports a lease's time to live in whole seconds, down, and
// the etcd client renews at a third of the TTL, so a TTL of 6 s shows 5,
// then 4, then 5 again at the renewal.
const renewedTTL = 6 * time.Second

// awaitRenewal waits until the time to live of lease has gone down and
// come back up: its holder renewed it.
func awaitRenewal(t *testing.T, cli *clientv3.Client, lease int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	low := int64(-1)
	for {
		resp, err := cli.TimeToLive(ctx, clientv3.LeaseID(lease))
		if err != nil {
			t.Fatalf("time to live of lease %x, waiting for its renewal: %v", lease, err)
		}
		switch {
		case resp.TTL < 0:
			t.Fatalf("lease %x expired, waiting for its renewal", lease)
		case low >= 0 && resp.TTL > low:
			return
		case low < 0 || resp.TTL < low:
			low = resp.TTL
		}
		time.Sleep(50 * time.Millisecond) // polling the lease: etcd announces no renewal
	}
}

// A service's user, read-write on its own prefix only, cannot write a
// value over serve's request limit over its own key. Meanwhile another
// service registers and its lease is renewed, and the largest values
// Muster writes go through: an instance at every limit of validation, and
// its deregistration by an operator, whose journal record carries it.
func TestServeRefusesOversizedWrites(t *testing.T) {
	_, endpoint, _ := authServe(t)
	root := userClient(t, endpoint, "root", quotaRootPassword)
	userSvc := serviceUser(t, root, endpoint, "user")
	orderSvc := serviceUser(t, root, endpoint, "order")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	junk := registry.DefaultPrefix + "/user/junk"
	for _, w := range []struct {
		size int
		want *regexp.Regexp
	}{
		{embedetcd.MaxRequestBytes, regexp.MustCompile(`^etcdserver: request is too large$`)},
		{1_400_000, regexp.MustCompile(`grpc: received message larger than max \(\d+ vs\. 1048576\)`)}, // the review's
	} {
		start := time.Now()
		_, err := userSvc.Put(ctx, junk, strings.Repeat("x", w.size))
		if err == nil || !w.want.MatchString(err.Error()) {
			t.Fatalf("put of %d bytes over its own key as user-svc: %v, want a refusal matching %q", w.size, err, w.want)
		}
		t.Logf("put of %d bytes as user-svc refused in %v: %v", w.size, time.Since(start).Round(time.Millisecond), err)
	}
	if resp, err := root.Get(ctx, junk); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("get %s after the refused puts: %v, %v; want nothing", junk, resp, err)
	}

	order := registrarOn(t, orderSvc, etcd.WithTTL(renewedTTL))
	register(t, order, registry.Instance{ID: "order-1", Name: "order", Addr: "10.0.0.2:9000"})
	start := time.Now()
	awaitRenewal(t, root, order.Status().Session)
	t.Logf("order-svc's lease renewed %v after its registration", time.Since(start).Round(time.Millisecond))

	// The largest instance value validation lets through, registered by
	// its service's user, then deregistered by an operator: the journal
	// record of the deletion, in the same transaction, carries the value.
	big := registrytest.LargestInstance("user", 0)
	val, err := registry.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	if 2*len(val) > embedetcd.MaxRequestBytes {
		t.Errorf("the largest instance value is %d bytes; embedetcd.MaxRequestBytes (%d) is said to be twice that or more", len(val), embedetcd.MaxRequestBytes)
	}
	register(t, registrarOn(t, userSvc), big)
	if err := etcd.Delete(ctx, root, "user", big.ID); err != nil {
		t.Fatalf("an operator's deletion of the largest instance: %v", err)
	}
	resp, err := root.Get(ctx, registry.JournalKey(registry.DefaultPrefix, "user"), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || len(resp.Kvs[0].Value) <= len(val) {
		t.Fatalf("journal of user after the deletion: %v, %v; want one record carrying the %d-byte value", resp, err, len(val))
	}
	t.Logf("instance value %d bytes, its deletion's record %d bytes", len(val), len(resp.Kvs[0].Value))

	// A value near the limit over its own key is taken; an operator's
	// deletion of it, which would record it, is too large: etcdctl del
	// (docs/SECURITY.md) is not.
	near := registry.Key(registry.DefaultPrefix, "user", "near")
	if _, err := userSvc.Put(ctx, near, strings.Repeat("x", embedetcd.MaxRequestBytes-256)); err != nil {
		t.Fatalf("put of a value near the limit: %v", err)
	}
	if err := etcd.Delete(ctx, root, "user", "near"); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
		t.Errorf("an operator's deletion of a value near the limit: %v, want %v", err, rpctypes.ErrRequestTooLarge)
	}
	if _, err := root.Delete(ctx, near); err != nil {
		t.Errorf("plain delete of %s: %v", near, err)
	}
	if st := order.Status(); !st.Registered || st.Reregistrations != 0 || st.Failures != 0 {
		t.Errorf("order's registrar after user-svc's writes: %+v, want registered, never failed", st)
	}
}

// alarmGauge returns muster_etcd_alarm{alarm=name} from the /metrics at
// addr.
func alarmGauge(t *testing.T, addr, name string) float64 {
	t.Helper()
	for _, m := range scrape(t, addr)["muster_etcd_alarm"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "alarm" && l.GetValue() == name {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("/metrics has no muster_etcd_alarm{alarm=%q}", name)
	return 0
}

// checkHealth fails t unless /healthz at addr answers code with a body
// matching re.
func checkHealth(t *testing.T, addr string, code int, re string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: waitTimeout}).Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code || !regexp.MustCompile(re).Match(body) {
		t.Fatalf("/healthz = %d %q, want %d matching %q", resp.StatusCode, body, code, re)
	}
}

// A service's user fills serve's backend quota by writing its own key
// again and again: etcd raises NOSPACE, serve logs it, exports it and
// fails /healthz; an instance registered before stays, a new registration
// waits. docs/SECURITY.md's recovery, run as written with etcdctl, clears
// the alarm: serve says so, /healthz is healthy again, the waiting
// registration lands, and the writer may no longer write.
func TestServeReportsNoSpaceAndRecovers(t *testing.T) {
	requireEtcdctl(t)
	const quota = 16 << 20
	serve, endpoint, metrics := authServe(t, "--quota-backend-bytes", strconv.Itoa(quota))
	root := userClient(t, endpoint, "root", quotaRootPassword)
	userSvc := serviceUser(t, root, endpoint, "user")
	orderSvc := serviceUser(t, root, endpoint, "order")
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	order := registrarOn(t, orderSvc, etcd.WithTTL(renewedTTL))
	register(t, order, registry.Instance{ID: "order-1", Name: "order", Addr: "10.0.0.2:9000"})
	checkHealth(t, metrics, http.StatusOK, `^ok\n$`)
	if v := alarmGauge(t, metrics, "NOSPACE"); v != 0 {
		t.Fatalf("muster_etcd_alarm{alarm=NOSPACE} = %v before any write, want 0", v)
	}
	readiness := probe{"muster serve", metrics}
	readiness.await(t, "order loaded", false, func(r health.Report) bool { s, ok := service(r, "order"); return ok && s.Loaded })

	junk := registry.DefaultPrefix + "/user/junk"
	val := strings.Repeat("x", embedetcd.MaxRequestBytes-1024)
	start, puts := time.Now(), 0
	var err error
	for ; err == nil; puts++ {
		if puts == 1000 {
			t.Fatalf("%d puts of %d bytes fit a quota of %d bytes", puts, len(val), quota)
		}
		_, err = userSvc.Put(ctx, junk, val)
	}
	if !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("put %d as user-svc: %v, want %v", puts, err, rpctypes.ErrNoSpace)
	}
	refused := time.Now()
	t.Logf("user-svc filled a quota of %d bytes in %v: %d puts of %d bytes accepted", quota, refused.Sub(start).Round(time.Millisecond), puts-1, len(val))

	line := awaitLine(t, serve, `msg="etcd raised the alarm NOSPACE`)
	for _, want := range []string{"level=ERROR", "quota of " + strconv.Itoa(quota) + " bytes", "docs/SECURITY.md", "alarm=NOSPACE"} {
		if !strings.Contains(line, want) {
			t.Errorf("serve's line on the alarm lacks %q: %s", want, line)
		}
	}
	t.Logf("logged %v after the refused put: %s", time.Since(refused).Round(time.Millisecond), line)
	if v := alarmGauge(t, metrics, "NOSPACE"); v != 1 {
		t.Errorf("muster_etcd_alarm{alarm=NOSPACE} = %v while raised, want 1", v)
	}
	checkHealth(t, metrics, http.StatusServiceUnavailable, `^etcd alarm NOSPACE: the database reached its quota`)
	// The alarm is serve's outage: reads go on, so it stays ready, saying
	// why it is stale; it lives.
	readiness.live(t)
	if code, r := readiness.readyz(t); code != http.StatusOK || r.Cause != "alarm" || r.StaleSince.IsZero() || !strings.Contains(r.Error, "NOSPACE") {
		t.Errorf("/readyz under NOSPACE = %d %+v, want 200, stale since the alarm, cause alarm", code, r)
	}
	if resp, err := (&http.Client{Timeout: waitTimeout}).Get(endpoint + "/health"); err != nil {
		t.Errorf("etcd's own /health: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"health":"false"`) {
			t.Errorf("etcd's own /health under NOSPACE = %q, want it failing (docs/SECURITY.md says so)", body)
		}
	}

	// What was registered stays (the lease is renewed); what is new waits.
	awaitRenewal(t, root, order.Status().Session)
	late := registrarOn(t, orderSvc)
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if err := late.Register(short, registry.Instance{ID: "order-2", Name: "order", Addr: "10.0.0.3:9000"}); !errors.Is(err, registry.ErrPending) {
		t.Fatalf("a registration under NOSPACE: %v, want %v", err, registry.ErrPending)
	}
	if err := late.Status().LastError; err == nil || !strings.Contains(err.Error(), "database space exceeded") {
		t.Errorf("the waiting registrar's last error: %v, want etcd's NOSPACE", err)
	}
	if err := etcd.SetOverride(ctx, root, "order", "order-1", registry.Override{Weight: new(int)}); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Errorf("an operator's drain under NOSPACE: %v, want %v", err, rpctypes.ErrNoSpace)
	}

	recoverFromNoSpace(t, endpoint, junk, "user-svc")
	recovered := time.Now()
	awaitLine(t, serve, `level=INFO msg="etcd cleared the alarm NOSPACE: it takes writes again" alarm=NOSPACE`)
	if v := alarmGauge(t, metrics, "NOSPACE"); v != 0 {
		t.Errorf("muster_etcd_alarm{alarm=NOSPACE} = %v once cleared, want 0", v)
	}
	checkHealth(t, metrics, http.StatusOK, `^ok\n$`)
	if code, r := readiness.readyz(t); code != http.StatusOK || r.Error != "" || !r.StaleSince.IsZero() {
		t.Errorf("/readyz once the alarm is cleared = %d %+v, want 200, not stale", code, r)
	}
	if err := late.WaitRegistered(ctx); err != nil {
		t.Fatalf("the waiting registration after the recovery: %v", err)
	}
	t.Logf("the waiting registration landed %v after the recovery", time.Since(recovered).Round(time.Millisecond))
	if _, err := userSvc.Put(ctx, junk, "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("a put as user-svc after the recovery: %v, want %v (its role taken away)", err, rpctypes.ErrPermissionDenied)
	}
	if st := order.Status(); !st.Registered || st.Reregistrations != 0 {
		t.Errorf("order's first registrar after the recovery: %+v, want registered under its first lease", st)
	}
}

// recoverFromNoSpace runs the shell blocks of docs/SECURITY.md's "Registry
// quota" as written, with etcdctl as root on endpoint: the first (finding
// the writer) when jq is installed, checking that the largest value it
// lists is key's; then the recovery, for key and its writer.
func recoverFromNoSpace(t *testing.T, endpoint, key, writer string) {
	t.Helper()
	blocks := securityBlocks(t, "Registry quota")
	if len(blocks) != 2 {
		t.Fatalf(`docs/SECURITY.md, "Registry quota": %d sh blocks, want 2 (finding the writer, recovering)`, len(blocks))
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "ETCDCTL_ENDPOINTS=" + endpoint, "ETCDCTL_USER=root:" + quotaRootPassword,
		"KEY=" + key, "WRITER=" + writer}
	sh := func(script string) string {
		cmd := exec.Command("sh", "-eux", "-c", script)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("docs/SECURITY.md's recovery failed: %v\n%s", err, out)
		}
		return string(out)
	}
	if _, err := exec.LookPath("jq"); err != nil {
		t.Logf("not finding the writer as docs/SECURITY.md does: %v", err)
	} else {
		out := sh(blocks[0])
		if !strings.Contains(out, "alarm:NOSPACE") || !regexp.MustCompile(`\n\d+ \d+ `+regexp.QuoteMeta(key)+`\n$`).MatchString(out) {
			t.Errorf("finding the writer as docs/SECURITY.md does printed\n%s\nwant the alarm, and %s last", out, key)
		}
		t.Logf("finding the writer:\n%s", out)
	}
	t.Logf("recovery:\n%s", sh(blocks[1]))
}
