package etcd_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// secPrefix is the default prefix: the RBAC recipe in docs/SECURITY.md
// grants permissions under it.
const secPrefix = registry.DefaultPrefix

// secClient returns a client made from etcd.ClientConfig, as users make
// them, with tlsConfig (nil for plain connections) and the given
// credentials ("" for none). It fails the test if the client cannot be
// created; with credentials, creating it logs in.
func secClient(t *testing.T, c *etcdtest.Cluster, tlsConfig *tls.Config, user, password string) *clientv3.Client {
	t.Helper()
	cfg := etcd.ClientConfig(c.Endpoints()...)
	cfg.TLS = tlsConfig
	cfg.Username, cfg.Password = user, password
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("new client as %q: %v", user, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// secAddUser creates, as root, a user with password and a role of the same
// name allowed perm on each key prefix: what docs/SECURITY.md does with
// etcdctl.
func secAddUser(t *testing.T, root *clientv3.Client, user, password string, perm clientv3.PermissionType, prefixes ...string) {
	t.Helper()
	ctx := ctxFor(t, 5*time.Second)
	if _, err := root.RoleAdd(ctx, user); err != nil {
		t.Fatalf("role add %s: %v", user, err)
	}
	for _, p := range prefixes {
		if _, err := root.RoleGrantPermission(ctx, user, p, clientv3.GetPrefixRangeEnd(p), perm); err != nil {
			t.Fatalf("role grant-permission %s %s: %v", user, p, err)
		}
	}
	if _, err := root.UserAdd(ctx, user, password); err != nil {
		t.Fatalf("user add %s: %v", user, err)
	}
	if _, err := root.UserGrantRole(ctx, user, user); err != nil {
		t.Fatalf("user grant-role %s: %v", user, err)
	}
}

// secWaitStatus waits until the registrar's status satisfies cond, polling:
// the Registrar offers no notification for its last error.
func secWaitStatus(t *testing.T, r *etcd.Registrar, d time.Duration, what string, cond func(registry.RegistrarStatus) bool) registry.RegistrarStatus {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st := r.Status()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; status %+v", d, what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// secWaitSnapshot waits until w's snapshot satisfies cond, polling: a
// snapshot that is already stale changes its error without a notification
// on Updates.
func secWaitSnapshot(t *testing.T, w registry.Watcher, d time.Duration, what string, cond func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := w.Snapshot()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last snapshot %s", d, what, registrytest.Describe(s))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestTLSRegistrarAndDiscovery(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithTLS())
	cli := secClient(t, c, c.TLS().ClientTLS(), "", "")
	r := newRegistrar(t, cli, reg(secPrefix)...)
	d := newDiscovery(t, secClient(t, c, c.TLS().ClientTLS(), "", ""), disc(secPrefix)...)
	ctx := ctxFor(t, 20*time.Second)
	w, err := d.Watch(ctx, "user")
	if err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "the empty service loaded over TLS", registrytest.HasIDs())
	if err := r.Register(ctx, instance("user", "u1", 9001)); err != nil {
		t.Fatalf("Register over TLS: %v", err)
	}
	registrytest.WaitFor(t, w, "u1", registrytest.HasIDs("u1"))
	if err := r.Deregister(ctx, "user", "u1"); err != nil {
		t.Fatalf("Deregister over TLS: %v", err)
	}
	registrytest.WaitFor(t, w, "u1 gone", registrytest.HasIDs())
}

// A client that does not trust the server's certificate, or has no client
// certificate, must not hang silently: Register returns within its timeout
// and both the registrar and the discovery name the certificate problem.
func TestTLSMisconfigurationIsReported(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithTLS())
	wrongCA := c.TLS().ClientTLS()
	wrongCA.RootCAs = etcdtest.GenerateTLS(t).ClientTLS().RootCAs
	noCert := c.TLS().ClientTLS()
	noCert.Certificates = nil
	cases := []struct {
		name string
		tls  *tls.Config
		want string // matches the reported cause
	}{
		{"wrong CA", wrongCA, "x509: certificate signed by unknown authority"},
		// With TLS 1.3 the server refuses the missing certificate after
		// the client's side of the handshake is done: the client reads
		// the server's alert, or finds the connection closed first (on
		// a write, or as EOF where it reads the server's HTTP/2 preface,
		// seen once on a loaded machine).
		{"no client certificate", noCert, "tls: certificate required|broken pipe|connection reset by peer|server preface: EOF"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 2 * time.Second // fast's request timeout
			cli := secClient(t, c, tc.tls, "", "")
			r := newRegistrar(t, cli, reg(secPrefix)...)
			d := newDiscovery(t, cli, disc(secPrefix)...)
			ctx := ctxFor(t, 20*time.Second)
			w, err := d.Watch(ctx, "user")
			if err != nil {
				t.Fatal(err)
			}

			start := time.Now()
			err = r.Register(ctx, instance("user", "u1", 9001))
			took := time.Since(start)
			if !errors.Is(err, registry.ErrPending) {
				t.Fatalf("Register: %v, want an error matching registry.ErrPending", err)
			}
			if took > timeout+time.Second {
				t.Fatalf("Register returned after %v, want about its %v timeout", took, timeout)
			}
			st := secWaitStatus(t, r, 2*timeout, "the registrar's last error", func(st registry.RegistrarStatus) bool {
				return st.LastError != nil
			})
			var ce *etcd.ConnectionError
			if !errors.As(st.LastError, &ce) || !errors.Is(st.LastError, context.DeadlineExceeded) || !regexp.MustCompile(tc.want).MatchString(ce.Cause) {
				t.Fatalf("registrar's LastError %q: want an etcd.ConnectionError matching context.DeadlineExceeded whose cause mentions %q", st.LastError, tc.want)
			}
			s := secWaitSnapshot(t, w, 2*timeout, "the snapshot's error from its failed load", func(s registry.Snapshot) bool {
				return s.Err != nil && strings.Contains(s.Err.Error(), "waiting for a connection")
			})
			if s.Loaded || !regexp.MustCompile(tc.want).MatchString(s.Err.Error()) {
				t.Fatalf("discovery snapshot %s: want not loaded, with an error mentioning %q", registrytest.Describe(s), tc.want)
			}
			t.Logf("Register (%v): %v", took.Round(time.Millisecond), err)
			t.Logf("Status().LastError: %v", st.LastError)
			t.Logf("Snapshot().Err: %v", s.Err)
		})
	}
}

// The isolation recipe of docs/SECURITY.md: a role allowed only
// <prefix>/user/ registers and discovers user, and gets a clear permission
// error, at once, for anything else.
func TestPerServiceIsolation(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithAuth("root-pw", 0))
	root := c.Client(t)
	secAddUser(t, root, "user-svc", "user-pw", clientv3.PermissionType(clientv3.PermReadWrite), secPrefix+"/user/")
	cli := secClient(t, c, nil, "user-svc", "user-pw")
	r := newRegistrar(t, cli, reg(secPrefix)...)
	ctx := ctxFor(t, 20*time.Second)

	if err := r.Register(ctx, instance("user", "u1", 9001)); err != nil {
		t.Fatalf("Register user as user-svc: %v", err)
	}
	// Neither another service nor one whose name merely starts with
	// "user": the permission covers the prefix with its trailing slash.
	for _, name := range []string{"order", "user-admin"} {
		start := time.Now()
		err := r.Register(ctx, instance(name, "x1", 9002))
		took := time.Since(start)
		if !errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, registry.ErrPending) {
			t.Fatalf("Register %s as user-svc: %v, want a permission error that is not ErrPending", name, err)
		}
		key := registry.Key(secPrefix, name, "x1")
		if !strings.Contains(err.Error(), key) {
			t.Fatalf("Register %s: error %q does not name the key %s", name, err, key)
		}
		if took > time.Second {
			t.Fatalf("Register %s took %v to be refused, want an answer at once", name, took)
		}
		t.Logf("Register %s: %v (after %v)", name, err, took.Round(time.Millisecond))
	}
	if st := r.Status(); !st.Registered || st.Instances != 1 || st.Pending != 0 {
		t.Fatalf("status %+v; want registered with only user/u1 (refused instances are dropped)", st)
	}
	if keys, _ := rawKeys(t, root, secPrefix+"/"); fmt.Sprint(keys) != "["+registry.Key(secPrefix, "user", "u1")+"]" {
		t.Fatalf("keys in etcd: %v, want only user/u1", keys)
	}

	d := newDiscovery(t, cli, disc(secPrefix)...)
	wu, err := d.Watch(ctx, "user")
	if err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, wu, "user/u1 seen by user-svc", registrytest.HasIDs("u1"))
	wo, err := d.Watch(ctx, "order")
	if err != nil {
		t.Fatal(err)
	}
	s := secWaitSnapshot(t, wo, 5*time.Second, "order refused", func(s registry.Snapshot) bool {
		return errors.Is(s.Err, rpctypes.ErrPermissionDenied)
	})
	if s.Loaded || !s.Stale() {
		t.Fatalf("order snapshot %s; want not loaded, with a permission error", registrytest.Describe(s))
	}
	t.Logf("order snapshot: %s", registrytest.Describe(s))
	if _, err := d.Services(ctx); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("Services as user-svc: %v, want a permission error (it reads the whole prefix)", err)
	}

	// Close revokes the lease, which etcd allows because user-svc may
	// write every key bound to it.
	if err := r.Close(); err != nil {
		t.Fatalf("Close as user-svc: %v", err)
	}
	if keys, _ := rawKeys(t, root, secPrefix+"/"); len(keys) != 0 {
		t.Fatalf("keys left after Close: %v", keys)
	}
}

// Simple auth tokens expire when unused for their TTL. Registrar and
// Discovery run across many token lifetimes with idle gaps longer than the
// TTL (so tokens do expire), while instances come and go: the registration
// stays under the same lease, every change is seen, and expired tokens cost
// a bounded number of logins and retries, not a retry storm.
func TestAuthTokenExpiry(t *testing.T) {
	const (
		tokenTTL = time.Second
		rounds   = 4
		// idle is longer than a token can live unused: TTL plus etcd's
		// one-second expiry tick, plus a margin.
		idle = tokenTTL + 1200*time.Millisecond
	)
	c := etcdtest.Start(t, etcdtest.WithAuth("root-pw", tokenTTL))
	root := c.Client(t)
	secAddUser(t, root, "user-svc", "user-pw", clientv3.PermissionType(clientv3.PermReadWrite), secPrefix+"/user/")
	secAddUser(t, root, "gateway", "gateway-pw", clientv3.PermissionType(clientv3.PermRead), secPrefix+"/")

	// The registrar's lease is kept alive every TTL/3 ≈ 1.7s, about as
	// long as its token lives unused (1 to 2s), so its keep-alive stream
	// meets expired tokens too. Billing is registered by another
	// registrar, as root.
	r := newRegistrar(t, secClient(t, c, nil, "user-svc", "user-pw"), reg(secPrefix, etcd.WithTTL(5*time.Second))...)
	billing := newRegistrar(t, root, reg(secPrefix)...)
	d := newDiscovery(t, secClient(t, c, nil, "gateway", "gateway-pw"), disc(secPrefix)...)
	ctx := ctxFor(t, time.Minute)

	if err := r.Register(ctx, instance("user", "steady", 9000)); err != nil {
		t.Fatal(err)
	}
	if err := billing.Register(ctx, instance("billing", "b0", 9100)); err != nil {
		t.Fatal(err)
	}
	lease := r.Status().Session
	wu, err := d.Watch(ctx, "user")
	if err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, wu, "steady", registrytest.HasIDs("steady"))

	before, cpuBefore, start := c.RPCStats(), cpuTime(t), time.Now()
	var wb registry.Watcher
	billingIDs := []string{"b0"}
	for i := 1; i <= rounds; i++ {
		// Idle: the point is to let the tokens expire, not to wait for
		// an event.
		time.Sleep(idle)
		if i == 2 {
			// A second service watched after the gateway's token
			// expired, on the watch stream the first one holds open
			// with that token. etcd refuses the watch
			// (etcd-io/etcd#12385); the Discovery reloads the
			// service and retries with backoff, so billing's
			// changes still arrive, late by up to the backoff cap.
			if wb, err = d.Watch(ctx, "billing"); err != nil {
				t.Fatal(err)
			}
			registrytest.WaitFor(t, wb, "billing b0", registrytest.HasIDs(billingIDs...))
		}
		// A burst of changes, each awaited by the gateway: a new
		// instance, a weight change, the previous round's instance
		// leaving.
		id := fmt.Sprintf("u%d", i)
		if err := r.Register(ctx, instance("user", id, 9000+i)); err != nil {
			t.Fatalf("round %d: Register %s: %v", i, id, err)
		}
		want := []string{"steady", id}
		if i > 1 {
			want = append(want, fmt.Sprintf("u%d", i-1))
		}
		registrytest.WaitFor(t, wu, id+" added", registrytest.HasIDs(want...))
		changed := instance("user", id, 9000+i)
		changed.Weight = 10 * i
		if err := r.Register(ctx, changed); err != nil {
			t.Fatalf("round %d: re-Register %s: %v", i, id, err)
		}
		registrytest.WaitFor(t, wu, id+" reweighted", func(s registry.Snapshot) bool {
			for _, in := range s.Instances {
				if in.ID == id {
					return in.Weight == 10*i
				}
			}
			return false
		})
		if i > 1 {
			prev := fmt.Sprintf("u%d", i-1)
			if err := r.Deregister(ctx, "user", prev); err != nil {
				t.Fatalf("round %d: Deregister %s: %v", i, prev, err)
			}
			registrytest.WaitFor(t, wu, prev+" removed", registrytest.HasIDs("steady", id))
		}
		if wb != nil {
			bid := fmt.Sprintf("b%d", i)
			if err := billing.Register(ctx, instance("billing", bid, 9100+i)); err != nil {
				t.Fatalf("round %d: Register billing %s: %v", i, bid, err)
			}
			billingIDs = append(billingIDs, bid)
			registrytest.WaitFor(t, wb, "billing "+bid, registrytest.HasIDs(billingIDs...))
		}
	}
	elapsed, cpu, after := time.Since(start), cpuTime(t)-cpuBefore, c.RPCStats()

	// Tear down in order: stop the billing watch, let the gateway's watch
	// stream carry one more change, then close the Discovery, all before
	// the clients close. etcd's client (v3.7.3) can hang in Close when it
	// stops a watch stream right after a watch creation on it was refused:
	// the refused watch's goroutine is not waited for properly.
	_ = wb.Close()
	last := instance("user", fmt.Sprintf("u%d", rounds), 9000+rounds)
	if err := r.Deregister(ctx, last.Name, last.ID); err != nil {
		t.Fatalf("Deregister %s: %v", last.ID, err)
	}
	registrytest.WaitFor(t, wu, last.ID+" removed", registrytest.HasIDs("steady"))
	_ = d.Close()

	st := r.Status()
	if !st.Registered || st.Session != lease || st.Reregistrations != 0 {
		t.Fatalf("registrar status %+v; want registered all along under lease %x", st, lease)
	}
	keys, leases := rawKeys(t, root, secPrefix+"/user/")
	if want := fmt.Sprintf("[%s]", registry.Key(secPrefix, "user", "steady")); fmt.Sprint(keys) != want {
		t.Fatalf("user keys %v, want %s", keys, want)
	}
	for k, l := range leases {
		if l != lease {
			t.Fatalf("key %s bound to lease %x, want %x", k, l, lease)
		}
	}

	delta := func(m, m0 map[string]int64, keys ...string) int64 {
		var n int64
		for _, k := range keys {
			n += m[k] - m0[k]
		}
		return n
	}
	logins := delta(after.Calls, before.Calls, etcdtest.MethodAuthenticate)
	unary := delta(after.Errors, before.Errors, rpctypes.ErrInvalidAuthToken.Error())
	refusedWatches := delta(after.Errors, before.Errors, rpctypes.ErrGRPCInvalidAuthToken.Error())
	var requests int64
	for m := range after.Calls {
		requests += delta(after.Calls, before.Calls, m)
	}
	lifetimes := float64(elapsed) / float64(tokenTTL)
	t.Logf("%v (%.1f token lifetimes): %d logins, %d requests refused and %d watch creations refused for an invalid token, %d requests in all; CPU %v (%.0f%% of one core)",
		elapsed.Round(time.Millisecond), lifetimes, logins, unary, refusedWatches, requests, cpu.Round(time.Millisecond), 100*cpu.Seconds()/elapsed.Seconds())
	if unary+refusedWatches == 0 {
		t.Fatalf("no request met an expired token: the test did not exercise expiry")
	}
	// Bounds. Each of the three clients logs in at most about once per
	// token lifetime; a retry storm does thousands of requests per second
	// and burns a core.
	if limit := int64(3*lifetimes) + 6; logins > limit {
		t.Errorf("%d logins in %.1f token lifetimes, want at most %d", logins, lifetimes, limit)
	}
	if limit := int64(3*lifetimes) + 6; unary > limit {
		t.Errorf("%d requests refused for an invalid token, want at most %d", unary, limit)
	}
	// A watch refused for its stream's expired token is retried on a new
	// stream, opened with the token the client renewed meanwhile, so it
	// is refused once per expiry; the bound allows two per idle round (a
	// token may also expire between the renewal and the new stream).
	// Measured: 1 refusal in each run; without the new stream, the retries
	// stay on the refused stream and 15 to 17 are refused (the backoff
	// paces them, 50ms to 500ms).
	if limit := int64(2 * rounds); refusedWatches > limit {
		t.Errorf("%d watch creations refused for an invalid token in %d token expiries, want at most %d: a refused watch must retry on a new stream", refusedWatches, rounds, limit)
	}
	if limit := elapsed / 2; cpu > limit {
		t.Errorf("the process used %v of CPU in %v, want at most %v (half a core)", cpu, elapsed, limit)
	}
}

// A registrar whose password stops working (rotated, or the user removed)
// reports the refusal, keeps retrying at a calm pace, and registers again
// once the password works again. The etcd client itself retries the login
// for its lease keep-alive stream every 500ms; each failed login costs the
// server a bcrypt comparison (tens of milliseconds at etcd's default cost),
// so the rate matters.
func TestRefusedCredentialsAreRetriedCalmly(t *testing.T) {
	const wrongFor = 4 * time.Second
	c := etcdtest.Start(t, etcdtest.WithAuth("root-pw", time.Second))
	root := c.Client(t)
	secAddUser(t, root, "user-svc", "user-pw", clientv3.PermissionType(clientv3.PermReadWrite), secPrefix+"/user/")
	stuck := make(chan string, 1)
	logs := slog.New(slog.NewTextHandler(lineFunc(func(line string) {
		if strings.Contains(line, "registration has failed for longer than") {
			select {
			case stuck <- line:
			default:
			}
		}
	}), nil))
	r := newRegistrar(t, secClient(t, c, nil, "user-svc", "user-pw"), reg(secPrefix, etcd.WithLogger(logs))...)
	d := newDiscovery(t, root, disc(secPrefix)...)
	ctx := ctxFor(t, time.Minute)
	if err := r.Register(ctx, instance("user", "u1", 9001)); err != nil {
		t.Fatal(err)
	}
	w, err := d.Watch(ctx, "user")
	if err != nil {
		t.Fatal(err)
	}
	registrytest.WaitFor(t, w, "u1", registrytest.HasIDs("u1"))

	if _, err := root.UserChangePassword(ctx, "user-svc", "rotated"); err != nil {
		t.Fatal(err)
	}
	before, cpuBefore, start := c.RPCStats(), cpuTime(t), time.Now()
	// The lease can no longer be kept alive: it expires, and the instance
	// with it.
	registrytest.WaitFor(t, w, "u1 expired with the lease", registrytest.HasIDs())
	st := secWaitStatus(t, r, 10*time.Second, "the login refusal in the status", func(st registry.RegistrarStatus) bool {
		return errors.Is(st.LastError, rpctypes.ErrAuthFailed)
	})
	if st.Registered {
		t.Fatalf("status %+v: registered without a working password", st)
	}
	// Let the retries run for a while to measure their rate.
	time.Sleep(max(wrongFor-time.Since(start), 0))
	elapsed, cpu, after := time.Since(start), cpuTime(t)-cpuBefore, c.RPCStats()
	logins := after.Calls[etcdtest.MethodAuthenticate] - before.Calls[etcdtest.MethodAuthenticate]
	rate := float64(logins) / elapsed.Seconds()
	t.Logf("with a refused password for %v: %d login attempts (%.1f/s), CPU %v; status error: %v",
		elapsed.Round(time.Millisecond), logins, rate, cpu.Round(time.Millisecond), st.LastError)
	if rate > 6 {
		t.Errorf("%.1f login attempts per second, want at most 6", rate)
	}
	if limit := elapsed / 2; cpu > limit {
		t.Errorf("the process used %v of CPU in %v, want at most %v", cpu, elapsed, limit)
	}
	// Past three lease TTLs of failures the registrar says plainly that
	// its instances are gone, and why; the refusals are counted as such.
	select {
	case line := <-stuck:
		if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "refuses this client's identity") {
			t.Errorf("the stuck registrar's line: %s", line)
		}
		t.Logf("logged: %s", line)
	case <-time.After(15 * time.Second):
		t.Error("no line says registration has failed for longer than three lease TTLs")
	}
	if st := r.Status(); st.Refusals == 0 || st.Refusals > st.Failures {
		t.Errorf("status %+v: want the refused logins counted in Refusals", st)
	}

	// The old password works again: the registrar registers by itself.
	if _, err := root.UserChangePassword(ctx, "user-svc", "user-pw"); err != nil {
		t.Fatal(err)
	}
	wctx := ctxFor(t, 10*time.Second)
	if err := r.WaitRegistered(wctx); err != nil {
		t.Fatalf("not registered again within 10s of the password working again: %v; status %+v", err, r.Status())
	}
	registrytest.WaitFor(t, w, "u1 back", registrytest.HasIDs("u1"))
}

// lineFunc is an io.Writer calling itself with each write: a slog text
// handler writes one record a write.
type lineFunc func(line string)

func (f lineFunc) Write(p []byte) (int, error) {
	f(string(p))
	return len(p), nil
}
