package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// An invalid option makes every constructor and function that takes it
// fail with an error naming it.
func TestInvalidOptionsAreErrors(t *testing.T) {
	cli, err := clientv3.New(etcd.ClientConfig("http://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, tc := range []struct {
		name string
		opt  etcd.StoreOption
		want string
	}{
		{"sub-second TTL", etcd.WithTTL(500 * time.Millisecond), "WithTTL(500ms)"},
		{"zero TTL", etcd.WithTTL(0), "WithTTL(0s)"},
		{"zero request timeout", etcd.WithRequestTimeout(0), "WithRequestTimeout(0s)"},
		{"zero backoff", etcd.WithBackoff(0, time.Second), "WithBackoff(0s, 1s)"},
		{"backoff max below min", etcd.WithBackoff(2*time.Second, time.Second), "WithBackoff(2s, 1s)"},
		{"negative progress interval", etcd.WithProgressInterval(-time.Second), "WithProgressInterval(-1s)"},
		{"negative linger", etcd.WithLinger(-time.Second), "WithLinger(-1s)"},
		{"zero audit interval", etcd.WithAuditInterval(0), "WithAuditInterval(0s)"},
		{"nil logger", etcd.WithLogger(nil), "WithLogger(nil)"},
		{"no operations per transaction", etcd.WithMaxTxnOps(0), "WithMaxTxnOps(0)"},
		{"empty prefix", etcd.WithPrefix(""), `WithPrefix("")`},
		{"root prefix", etcd.WithPrefix("/"), `WithPrefix("/")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := etcd.NewStore(cli, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
				if s != nil {
					_ = s.Close()
				}
				t.Fatalf("NewStore with %s: error %v, want one naming the option", tc.want, err)
			}
			if opt, ok := tc.opt.(etcd.RegistrarOption); ok {
				r, err := etcd.NewRegistrar(cli, opt)
				if err == nil {
					_ = r.Close()
					t.Fatalf("NewRegistrar with %s: no error", tc.want)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("NewRegistrar with %s: error %q does not name the option", tc.want, err)
				}
			}
			if opt, ok := tc.opt.(etcd.DiscoveryOption); ok {
				if d, err := etcd.NewDiscovery(cli, opt); err == nil || !strings.Contains(err.Error(), tc.want) {
					if d != nil {
						_ = d.Close()
					}
					t.Fatalf("NewDiscovery with %s: error %v, want one naming the option", tc.want, err)
				}
			}
			if opt, ok := tc.opt.(etcd.WatchOption); ok {
				if _, err := etcd.NewCanaries(cli, opt); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("NewCanaries with %s: error %v, want one naming the option", tc.want, err)
				}
			}
			if opt, ok := tc.opt.(etcd.WriteOption); ok {
				err := etcd.Delete(context.Background(), cli, "svc", "a", opt)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Delete with %s: error %v, want one naming the option", tc.want, err)
				}
			}
		})
	}
	// The shortest valid TTL.
	r, err := etcd.NewRegistrar(cli, etcd.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("WithTTL(1s): %v", err)
	}
	_ = r.Close()
}

// An operator's deletion of a live instance's key is undone within a
// second: the registrar watches the deletions in its services.
func TestKeyDeletedByHandIsWrittenAgain(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	// The audit, which would also find the key missing, runs far less
	// often than the bound: the repair is the watch's.
	r := newRegistrar(t, cli, reg("/p", etcd.WithAuditInterval(time.Hour))...)
	ctx := ctxFor(t, 20*time.Second)
	for _, id := range []string{"a", "b"} {
		if err := r.Register(ctx, instance("svc", id, 9000)); err != nil {
			t.Fatal(err)
		}
	}
	_, before := rawKeys(t, cli, "/p/svc/")
	for round := 1; round <= 3; round++ {
		if err := etcd.Delete(ctx, cli, "svc", "a", etcd.WithPrefix("/p")); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		took := waitKeys(t, cli, "/p/svc/", time.Second, "a deleted by hand written again within 1s", func(keys []string, leases map[string]int64) bool {
			return len(keys) == 2 && leases["/p/svc/a"] == before["/p/svc/b"]
		})
		t.Logf("round %d: key back %v after the delete returned", round, took.Sub(deleted).Round(time.Millisecond))
		// The registrar records its write just after etcd has it.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		err := r.WaitRegistered(wctx)
		cancel()
		if st := r.Status(); err != nil || st.Repairs != uint64(round) {
			t.Fatalf("status %+v (%v), want %d repairs and registered", st, err, round)
		}
	}
	// A deregistered key is not written again.
	if err := r.Deregister(ctx, "svc", "b"); err != nil {
		t.Fatal(err)
	}
	assertKeysStay(t, cli, "/p/svc/", []string{"/p/svc/a"}, 500*time.Millisecond)
}

// A key overwritten by another writer (detached from the lease) is taken
// back within the audit interval: the audit lists the lease's keys.
func TestOverwrittenKeyIsTakenBackByTheAudit(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	const audit = 300 * time.Millisecond
	r := newRegistrar(t, cli, reg("/p", etcd.WithAuditInterval(audit))...)
	ctx := ctxFor(t, 20*time.Second)
	if err := r.Register(ctx, instance("svc", "a", 9000)); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "/p/svc/a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get: %v %v", resp, err)
	}
	want, lease := string(resp.Kvs[0].Value), resp.Kvs[0].Lease
	forged := strings.Replace(want, "127.0.0.1:9000", "127.0.0.1:9999", 1)
	if _, err := cli.Put(ctx, "/p/svc/a", forged); err != nil {
		t.Fatal(err)
	}
	put := time.Now()
	waitKeys(t, cli, "/p/svc/", audit+time.Second, "the overwritten key written again with the lease", func(_ []string, leases map[string]int64) bool {
		return leases["/p/svc/a"] == lease
	})
	t.Logf("key taken back %v after the overwrite", time.Since(put).Round(time.Millisecond))
	resp, err = cli.Get(ctx, "/p/svc/a")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want {
		t.Fatalf("after the repair: %v %v, want the registrar's value %s", resp, err, want)
	}
	if st := r.Status(); st.Repairs != 1 {
		t.Fatalf("status %+v, want 1 repair", st)
	}
}

// While the registrar's last attempt failed, Register does not wait for the
// request timeout to report ErrPending.
func TestRegisterReportsPendingAtOnceWhileEtcdIsUnreachable(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	const timeout = 3 * time.Second
	r := newRegistrar(t, cli, reg("/p", etcd.WithRequestTimeout(timeout))...)
	ctx := ctxFor(t, 60*time.Second)
	if err := r.Register(ctx, instance("svc", "a", 9000)); err != nil {
		t.Fatal(err)
	}
	c.StopAll(t)
	// The outage is noticed when the lease can no longer be renewed.
	for deadline := time.Now().Add(15 * time.Second); r.Status().LastError == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("no failure reported 15s into the outage; status %+v", r.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	err := r.Register(ctx, instance("svc", "b", 9001))
	took := time.Since(start)
	if !errors.Is(err, registry.ErrPending) {
		t.Fatalf("Register during the outage: %v, want ErrPending", err)
	}
	t.Logf("Register returned after %v: %v", took, err)
	if took > timeout/3 {
		t.Fatalf("Register took %v to report ErrPending, want well under the %v request timeout", took, timeout)
	}
	c.RestartAll(t)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := r.WaitRegistered(wctx); err != nil {
		t.Fatalf("not registered after the outage: %v; status %+v", err, r.Status())
	}
	keys, _ := rawKeys(t, cli, "/p/svc/")
	if fmt.Sprint(keys) != "[/p/svc/a /p/svc/b]" {
		t.Fatalf("keys %v, want a and b", keys)
	}
}

// A member that holds the lease's keepalive stream without answering (a
// partition or a frozen process keeps the connection open) costs no key:
// the registrar renews through another member before the lease expires.
// Each member in turn is cut off for three TTLs, so one of the rounds
// takes away the member carrying the keepalive, whichever it is.
func TestStalledKeepAliveMemberCostsNoKey(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithSize(3))
	const ttl = 2 * time.Second
	cli := c.Client(t)
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r := newRegistrar(t, cli, reg("/p", etcd.WithTTL(ttl), etcd.WithLogger(log))...)
	ctx := ctxFor(t, 2*time.Minute)
	var want []string
	for i := 0; i < 5; i++ {
		if err := r.Register(ctx, instance("svc", fmt.Sprintf("i%d", i), 9000+i)); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("/p/svc/i%d", i))
	}
	lease := r.Status().Session
	for i, m := range c.Members() {
		// Check through another member, directly.
		check := c.Client(t, c.Members()[(i+1)%3].DirectEndpoint())
		m.Stall()
		until := time.Now().Add(3 * ttl)
		polls := 0
		for time.Now().Before(until) {
			keys, leases := rawKeys(t, check, "/p/svc/")
			if fmt.Sprint(keys) != fmt.Sprint(want) {
				m.Heal()
				t.Fatalf("member %s cut off for %v: keys %v, want %v", m.Name(), 3*ttl-time.Until(until), keys, want)
			}
			for k, l := range leases {
				if l != lease {
					m.Heal()
					t.Fatalf("member %s cut off: key %s on lease %x, want the registrar's lease %x", m.Name(), k, l, lease)
				}
			}
			polls++
			time.Sleep(100 * time.Millisecond)
		}
		m.Heal()
		t.Logf("member %s cut off for %v: all %d keys present in %d checks", m.Name(), 3*ttl, len(want), polls)
	}
	if st := r.Status(); st.Reregistrations != 0 || st.Session != lease || !st.Registered {
		t.Fatalf("status %+v: want the first lease %x kept, no re-registration", st, lease)
	}
	if logs.count("renewing through another member") == 0 {
		t.Fatal("no stalled member was logged")
	}
}

// waitKeys polls the keys under prefix until ok holds, failing the test
// after within. It returns when ok first held.
func waitKeys(t *testing.T, cli *clientv3.Client, prefix string, within time.Duration, what string, ok func([]string, map[string]int64) bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		keys, leases := rawKeys(t, cli, prefix)
		if ok(keys, leases) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; keys %v leases %v", what, within, keys, leases)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// assertKeysStay fails the test if the keys under prefix are not exactly
// want at any check during d.
func assertKeysStay(t *testing.T, cli *clientv3.Client, prefix string, want []string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if keys, _ := rawKeys(t, cli, prefix); fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Fatalf("keys %v, want %v", keys, want)
		}
	}
}

// A cluster whose every member is merely slow, answering a renewal later
// than TTL/6, still keeps the lease and every key on it: late answers
// count, and nothing gives up a slow lease for a new one. What this test
// proves is that slowness alone costs nothing; it passes without the
// resend of an unanswered renewal (one member, delayed both ways, answers
// the first renewal in time for the TTL). The resend is proven by
// TestStalledKeepAliveMemberCostsNoKey, where an unanswered renewal must be
// sent again on another member for the lease to live.
func TestSlowAnswersKeepTheLease(t *testing.T) {
	c := etcdtest.Start(t)
	const ttl = 3 * time.Second
	cli := c.Client(t)
	r := newRegistrar(t, cli, reg("/p", etcd.WithTTL(ttl))...)
	ctx := ctxFor(t, time.Minute)
	if err := r.Register(ctx, instance("svc", "a", 9000)); err != nil {
		t.Fatal(err)
	}
	lease := r.Status().Session
	m := c.Members()[0]
	// 250ms each way: a round trip takes more than 500ms, the TTL/6 a
	// renewal is given before it is sent again elsewhere.
	m.Delay(250 * time.Millisecond)
	defer m.Heal()
	check := c.Client(t, m.DirectEndpoint())
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if keys, leases := rawKeys(t, check, "/p/svc/"); len(keys) != 1 || leases["/p/svc/a"] != lease {
			t.Fatalf("with every answer 500ms late: keys %v leases %v, want a on lease %x", keys, leases, lease)
		}
	}
	if st := r.Status(); st.Reregistrations != 0 || st.Session != lease {
		t.Fatalf("status %+v: want the first lease kept", st)
	}
}

// A restore from a backup keeps the lease (it was in the backup) but loses
// an instance registered after the backup and brings back an older value
// of another: etcd's history went back below the registrar's writes, with
// no event a watch could see. The audit finds both within its interval.
func TestRestoreFromBackupIsRepairedByTheAudit(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	const audit = 500 * time.Millisecond
	// A TTL long enough that the keepalive survives the restore's
	// outage: the repair must be the audit's, not a re-registration.
	r := newRegistrar(t, cli, reg("/p", etcd.WithTTL(30*time.Second), etcd.WithAuditInterval(audit))...)
	ctx := ctxFor(t, time.Minute)
	a := instance("svc", "a", 9000)
	if err := r.Register(ctx, a); err != nil {
		t.Fatal(err)
	}
	backup := c.Backup(t)
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	a.Weight = 200
	for _, in := range []registry.Instance{a, instance("svc", "b", 9001)} {
		if err := r.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	lease := r.Status().Session
	c.Restore(t, backup)
	restored := time.Now()
	waitRestoreRepaired(t, ctx, cli, r, lease, audit+3*time.Second)
	t.Logf("repaired %v after the restore returned", time.Since(restored).Round(time.Millisecond))
}

// waitRestoreRepaired waits within the bound for the keys of a restore
// test written again under lease: a with weight 200, and b; then it
// requires r's status to show the lease kept and repairs counted.
func waitRestoreRepaired(t *testing.T, ctx context.Context, cli *clientv3.Client, r *etcd.Registrar, lease int64, within time.Duration) {
	t.Helper()
	waitKeys(t, cli, "/p/svc/", within, "a (weight 200) and b back after the restore", func(keys []string, leases map[string]int64) bool {
		if fmt.Sprint(keys) != "[/p/svc/a /p/svc/b]" || leases["/p/svc/a"] != lease || leases["/p/svc/b"] != lease {
			return false
		}
		resp, err := cli.Get(ctx, "/p/svc/a")
		if err != nil || len(resp.Kvs) != 1 {
			return false
		}
		in, err := registry.Unmarshal(resp.Kvs[0].Value)
		return err == nil && in.Weight == 200
	})
	if st := r.Status(); st.Reregistrations != 0 || st.Session != lease || st.Repairs == 0 {
		t.Fatalf("status %+v: want the lease kept and repairs counted", st)
	}
}
