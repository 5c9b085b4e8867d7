package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

// A Put issued during a stall does not complete; after Heal the same
// request, on the same connection, completes with every byte of its value.
func TestStallHoldsARequest(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	cli := c.Client(t)
	direct := c.Client(t, c.DirectEndpoints()...)
	if err := put(cli, "k", "v0"); err != nil {
		t.Fatalf("put: %v", err)
	}
	conns := etcdtest.ProxyAccepted(m)

	// Several chunks, so that some wait in the proxy and some in the
	// kernel's buffers.
	value := strings.Repeat("0123456789abcdef", 256<<10/16)
	m.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cli.Put(ctx, "k", value)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("put completed during the stall: %v", err)
	case <-time.After(time.Second):
	}
	if err := getValue(direct, "k", "v0"); err != nil {
		t.Fatalf("the put reached the member during the stall: %v", err)
	}

	m.Heal()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("put after Heal: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("put not completed within 10s of Heal")
	}
	if err := getValue(direct, "k", value); err != nil {
		t.Fatalf("value after Heal: %.100v", err)
	}
	if got := etcdtest.ProxyAccepted(m); got != conns {
		t.Fatalf("the proxy accepted %d connections during the test, want 0 (the client reconnected)", got-conns)
	}
}

// A watch opened before a stall receives, after Heal and on the same
// connection, the events made meanwhile through another member: the
// bytes were held, not dropped.
func TestStallHoldsWatchEvents(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithSize(3))
	ms := c.Members()
	cli := c.Client(t, ms[0].Endpoint())
	other := c.Client(t, ms[1].Endpoint())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := cli.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("first watch response is not the created notification: %+v", resp)
	}
	conns := etcdtest.ProxyAccepted(ms[0])

	ms[0].Stall()
	const n = 20
	for i := range n {
		if err := put(other, fmt.Sprintf("w/%02d", i), strings.Repeat("x", 4096)); err != nil {
			t.Fatalf("put through %s during the stall: %v", ms[1].Name(), err)
		}
	}
	select {
	case resp := <-wch:
		t.Fatalf("watch got a response during the stall: %+v", resp)
	case <-time.After(500 * time.Millisecond):
	}

	ms[0].Heal()
	var got []string
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for len(got) < n {
		select {
		case resp, ok := <-wch:
			if !ok || resp.Err() != nil {
				t.Fatalf("watch after Heal: ok=%v err=%v", ok, resp.Err())
			}
			for _, ev := range resp.Events {
				got = append(got, string(ev.Kv.Key))
			}
		case <-timer.C:
			t.Fatalf("watch got %d of %d events within 10s of Heal: %v", len(got), n, got)
		}
	}
	for i, k := range got {
		if want := fmt.Sprintf("w/%02d", i); k != want {
			t.Fatalf("event %d is %s, want %s (events %v)", i, k, want, got)
		}
	}
	if got := etcdtest.ProxyAccepted(ms[0]); got != conns {
		t.Fatalf("the proxy accepted %d connections, want 0 (the watch reconnected instead of receiving held bytes)", got-conns)
	}
}

// A stalled proxy accepts new connections, but nothing flows until Heal.
func TestStallAcceptsNewConnections(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	m.Stall()
	cli := c.Client(t)
	if err := put(cli, "k", "v"); err == nil {
		t.Fatalf("put on a new connection through a stalled proxy succeeded")
	}
	if etcdtest.ProxyAccepted(m) == 0 {
		t.Fatalf("the stalled proxy accepted no connection")
	}
	m.Heal()
	eventually(t, 10*time.Second, "put after Heal", func() error { return put(cli, "k", "v") })
}

// Reset ends an open connection at once and refuses new ones quickly,
// not by a timeout; after Heal the client's watch resumes.
func TestReset(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	cli := c.Client(t)
	direct := c.Client(t, c.DirectEndpoints()...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := cli.Watch(ctx, "w", clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("first watch response is not the created notification: %+v", resp)
	}
	conn := cli.ActiveConnection()
	if s := conn.GetState(); s != connectivity.Ready {
		t.Fatalf("client connection %v before Reset, want READY", s)
	}

	m.Reset()
	start := time.Now()
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	if !conn.WaitForStateChange(sctx, connectivity.Ready) {
		t.Fatalf("client connection still READY 1s after Reset")
	}
	t.Logf("client connection left READY %v after Reset", time.Since(start))

	// A new connection is reset at once.
	u, err := url.Parse(m.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	raw, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err == nil {
		_ = raw.SetDeadline(time.Now().Add(2 * time.Second))
		_, err = raw.Read(make([]byte, 1))
		raw.Close()
	}
	if took := time.Since(start); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, io.EOF) || took > 500*time.Millisecond {
		t.Fatalf("new connection during Reset: %v after %v, want a reset or refusal at once", err, took)
	}
	// A new client cannot reach the member either.
	fresh := c.Client(t)
	if err := put(fresh, "k", "v"); err == nil {
		t.Fatalf("put through a reset proxy succeeded")
	}
	if err := put(direct, "w", "x"); err != nil {
		t.Fatalf("direct put during Reset: %v", err)
	}

	m.Heal()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case resp := <-wch:
		if resp.Err() != nil || len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != "x" {
			t.Fatalf("watch after Heal: %+v, err %v", resp, resp.Err())
		}
	case <-timer.C:
		t.Fatalf("watch opened before Reset got no event within 10s of Heal")
	}
}

// Process members: Freeze makes requests to the frozen member hang while
// the others keep serving; Thaw resumes it; Kill then Restart serves the
// same data again. Close leaves no process behind.
func TestProcessMembers(t *testing.T) {
	start := time.Now()
	c := etcdtest.Start(t, etcdtest.WithSize(3), etcdtest.WithProcesses())
	t.Logf("3 process members started in %v", time.Since(start))
	ms := c.Members()
	var pids []int
	for _, m := range ms {
		pids = append(pids, m.Pid())
	}
	if slices.Contains(pids, 0) {
		t.Fatalf("Pid() of running process members: %v, want each one's process", pids)
	}
	cli := c.Client(t)
	if err := put(cli, "k", "v1"); err != nil {
		t.Fatalf("put: %v", err)
	}

	frozen := ms[c.WaitLeader(t)] // the leader: the others must elect another
	fcli := c.Client(t, frozen.Endpoint())
	resp, err := get(fcli, "k")
	if err != nil {
		t.Fatalf("get through %s: %v", frozen.Name(), err)
	}
	if got := c.MemberByID(resp.Header.MemberId); got != frozen {
		t.Fatalf("MemberByID(%x) = %v, want %s", resp.Header.MemberId, got, frozen.Name())
	}

	frozen.Freeze(t)
	start = time.Now()
	_, err = get(fcli, "k")
	if !isOutage(err) || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("get from the frozen member: %v after %v, want it to hang until its 1s deadline", err, time.Since(start))
	}
	lead := c.WaitLeader(t)
	if ms[lead] == frozen {
		t.Fatalf("WaitLeader() = the frozen member")
	}
	var others []string
	for _, m := range ms {
		if m != frozen {
			others = append(others, m.Endpoint())
		}
	}
	ocli := c.Client(t, others...)
	took := eventually(t, 10*time.Second, "put through the others", func() error { return put(ocli, "k", "v2") })
	t.Logf("quorum served a put %v after the leader froze", took)

	frozen.Thaw(t)
	eventually(t, 10*time.Second, "read from the thawed member", func() error { return getValue(fcli, "k", "v2") })

	victim := frozen
	id := victim.ID()
	victim.Kill(t)
	if victim.Running() || victim.Pid() != 0 {
		t.Fatalf("member running (pid %d) after Kill", victim.Pid())
	}
	if _, err := get(fcli, "k"); !isOutage(err) {
		t.Fatalf("get from the killed member: %v, want an outage", err)
	}
	victim.Restart(t)
	if victim.ID() != id {
		t.Fatalf("member ID %x after Restart, want %x", victim.ID(), id)
	}
	eventually(t, 10*time.Second, "read from the restarted member", func() error { return getValue(fcli, "k", "v2") })

	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("Etcd() of a process member did not panic")
			}
		}()
		victim.Etcd()
	}()

	pids = append(pids, victim.Pid())
	c.Close()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Close (kill -0: %v)", pid, err)
		}
	}
}

// Stop of a process member is graceful (SIGTERM), even when frozen.
func TestProcessStopFrozen(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithProcesses())
	m := c.Members()[0]
	cli := c.Client(t)
	if err := put(cli, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	m.Freeze(t)
	m.Stop(t)
	m.Restart(t)
	eventually(t, 10*time.Second, "read after restart", func() error { return getValue(cli, "k", "v") })
}

func TestBackupRestoreWipe(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	cli := c.Client(t)
	if err := put(cli, "k", "v1"); err != nil {
		t.Fatalf("put: %v", err)
	}
	before, err := get(cli, "k")
	if err != nil {
		t.Fatal(err)
	}
	backup := c.Backup(t)
	if m.DataDir() == backup || !m.Running() {
		t.Fatalf("Backup returned the data dir or left the member stopped")
	}
	eventually(t, 10*time.Second, "put after Backup", func() error { return put(cli, "k", "v2") })
	if err := put(cli, "k2", "x"); err != nil {
		t.Fatalf("put: %v", err)
	}

	c.Restore(t, backup)
	var after *clientv3.GetResponse
	eventually(t, 10*time.Second, "read after Restore", func() error {
		var err error
		after, err = get(cli, "k")
		return err
	})
	if len(after.Kvs) != 1 || string(after.Kvs[0].Value) != "v1" || after.Header.Revision != before.Header.Revision {
		t.Fatalf("after Restore k = %v at revision %d, want v1 at revision %d", after.Kvs, after.Header.Revision, before.Header.Revision)
	}
	if after.Header.ClusterId != before.Header.ClusterId || after.Header.MemberId != before.Header.MemberId {
		t.Fatalf("Restore changed the cluster or member ID")
	}
	if resp, err := get(cli, "k2"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("k2 after Restore: %v, %v; want no key", resp, err)
	}

	oldID := m.ID()
	c.Wipe(t)
	var wiped *clientv3.GetResponse
	eventually(t, 10*time.Second, "read after Wipe", func() error {
		var err error
		wiped, err = get(cli, "k")
		return err
	})
	if len(wiped.Kvs) != 0 || wiped.Header.Revision != 1 {
		t.Fatalf("after Wipe k = %v at revision %d, want no key at revision 1", wiped.Kvs, wiped.Header.Revision)
	}
	if wiped.Header.ClusterId == before.Header.ClusterId || m.ID() == oldID || m.ID() != wiped.Header.MemberId {
		t.Fatalf("after Wipe cluster ID %x (was %x), member ID %x (was %x, header %x): want new IDs",
			wiped.Header.ClusterId, before.Header.ClusterId, m.ID(), oldID, wiped.Header.MemberId)
	}
	if c.MemberByID(wiped.Header.MemberId) != m {
		t.Fatalf("MemberByID does not find the wiped member")
	}
}

// Process members serve TLS as in-process ones do.
func TestProcessMembersTLS(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithProcesses(), etcdtest.WithTLS())
	cli := c.Client(t)
	if err := put(cli, "k", "v"); err != nil {
		t.Fatalf("put over TLS to a process member: %v", err)
	}
	if err := getValue(c.Client(t, c.DirectEndpoints()...), "k", "v"); err != nil {
		t.Fatalf("direct get over TLS: %v", err)
	}
}
