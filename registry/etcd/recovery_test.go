package etcd_test

import (
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// The lines an operator reads when etcd is back.
const (
	registeredAgain = "registered again after an outage"
	watchResumed    = "watch resumed; list current again"
)

// TestRecoveryIsLoggedOnceWithTheOutage stops etcd for longer than the
// lease TTL and restarts it: the Registrar and the Discovery each log their
// way back once, with the outage's length.
func TestRecoveryIsLoggedOnceWithTheOutage(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	regLogs, discLogs := &lockedBuffer{}, &lockedBuffer{}
	r := newRegistrar(t, cli, reg("/p", etcd.WithLogger(slog.New(slog.NewTextHandler(regLogs, nil))))...)
	d := newDiscovery(t, cli, disc("/p", etcd.WithLogger(slog.New(slog.NewTextHandler(discLogs, nil))))...)
	ctx := ctxFor(t, 60*time.Second)
	w := registerAndWatch(t, ctx, r, d)

	m := c.Members()[0]
	stopped := time.Now()
	m.Stop(t)
	registrytest.WaitFor(t, w, "stale while etcd is stopped", func(s registry.Snapshot) bool { return s.Stale() })
	staleSeen := time.Now()
	// The lease (TTL 2s) expires without renewals; the registrar notices
	// within the TTL and starts its outage.
	waitStatus(t, r, 10*time.Second, "the registrar unregistered while etcd is stopped",
		func(st registry.RegistrarStatus) bool { return !st.Registered })
	lostSeen := time.Now()
	// The outage itself, not a wait for an event: etcd stays down a
	// second longer, so the logged length is clearly more than rounding.
	time.Sleep(time.Second)

	restarting := time.Now()
	m.Restart(t)
	if err := r.WaitRegistered(ctx); err != nil {
		t.Fatalf("not registered again after the restart: %v", err)
	}
	registrytest.WaitForWithin(t, w, 10*time.Second, "fresh after the restart", func(s registry.Snapshot) bool { return !s.Stale() })
	back := time.Now()
	// Two more writes: the second returns after the loop iteration that
	// wrote the first, so every line of the recovery is written by then;
	// the watcher's sight of "c" comes after the publish that logged.
	for _, id := range []string{"b", "c"} {
		if err := r.Register(ctx, instance("svc", id, 9002)); err != nil {
			t.Fatal(err)
		}
	}
	registrytest.WaitFor(t, w, "b and c after the restart", registrytest.HasIDs("a", "b", "c"))

	for _, l := range []struct {
		name, line string
		logs       *lockedBuffer
		min, max   time.Duration
	}{
		// Each outage starts no later than the test saw it (the
		// registrar unregistered, the snapshot stale) and ends after
		// the restart: that much at least. The registrar counts from a
		// TTL before the lease's loss, no earlier than the last renewal
		// etcd answered (at most TTL/3 + TTL/6 = 1s before the stop);
		// the discovery from the silence it noticed, after the stop:
		// that much at most. 100ms of rounding either way.
		{"registrar", registeredAgain, regLogs, restarting.Sub(lostSeen) - 100*time.Millisecond, back.Sub(stopped) + 1100*time.Millisecond},
		{"discovery", watchResumed, discLogs, restarting.Sub(staleSeen) - 100*time.Millisecond, back.Sub(stopped) + 100*time.Millisecond},
	} {
		text := l.logs.String()
		lines := regexp.MustCompile(`(?m)^.*`+regexp.QuoteMeta(l.line)+`.*$`).FindAllString(text, -1)
		if len(lines) != 1 {
			t.Fatalf("%s: %d lines with %q, want exactly one; logs:\n%s", l.name, len(lines), l.line, text)
		}
		m := regexp.MustCompile(`(?:outage|stale_for)=(\S+)`).FindStringSubmatch(lines[0])
		if m == nil {
			t.Fatalf("%s: no outage length in %q", l.name, lines[0])
		}
		got, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatalf("%s: %q: %v", l.name, lines[0], err)
		}
		if got < l.min || got > l.max {
			t.Fatalf("%s: outage logged as %v, want between %v and %v: %q", l.name, got, l.min.Round(time.Millisecond), l.max.Round(time.Millisecond), lines[0])
		}
		if n := l.logs.count("retry_in"); n != 0 {
			t.Fatalf("%s: %d lines still say retry_in:\n%s", l.name, n, text)
		}
		t.Logf("%s: %s", l.name, lines[0])
	}
}

// waitStatus waits until cond holds for r's status. The status has no
// change notification for a loss, so it is checked every 10ms.
func waitStatus(t *testing.T, r *etcd.Registrar, within time.Duration, what string, cond func(registry.RegistrarStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond(r.Status()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; status %+v", what, within, r.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
