package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfChild()
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// eventually calls f until it returns nil or timeout passes, and fails the
// test with f's last error then.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not done within %v: %v", what, timeout, err)
		}
		<-tick.C
	}
}

func put(cli *clientv3.Client, key, val string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := cli.Put(ctx, key, val)
	return err
}

func get(cli *clientv3.Client, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return cli.Get(ctx, key, opts...)
}

// getValue reads key and fails unless it has value want.
func getValue(cli *clientv3.Client, key, want string) error {
	resp, err := get(cli, key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want {
		return fmt.Errorf("get %q = %v, want %q", key, resp.Kvs, want)
	}
	return nil
}

// isOutage reports whether err is what a client sees when its server is
// unreachable.
func isOutage(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Unavailable:
		return true
	}
	return false
}

func TestSingleMember(t *testing.T) {
	start := time.Now()
	c := etcdtest.Start(t)
	t.Logf("1-member cluster started in %v", time.Since(start))

	if got := len(c.Members()); got != 1 {
		t.Fatalf("Members() has %d members, want 1", got)
	}
	m := c.Members()[0]
	if !m.Running() || m.Etcd() == nil {
		t.Fatalf("member %s not running after Start", m.Name())
	}
	if c.Endpoints()[0] == c.DirectEndpoints()[0] {
		t.Fatalf("Endpoints() %v equal DirectEndpoints() %v", c.Endpoints(), c.DirectEndpoints())
	}
	if m.Endpoint() != c.Endpoints()[0] || m.DirectEndpoint() != c.DirectEndpoints()[0] {
		t.Fatalf("member endpoints %s/%s differ from cluster endpoints %v/%v",
			m.Endpoint(), m.DirectEndpoint(), c.Endpoints(), c.DirectEndpoints())
	}
	if !strings.HasPrefix(m.Endpoint(), "http://127.0.0.1:") {
		t.Fatalf("Endpoint() = %q, want http://127.0.0.1:PORT", m.Endpoint())
	}
	if got := c.WaitLeader(t); got != 0 {
		t.Fatalf("WaitLeader() = %d, want 0", got)
	}

	cli := c.Client(t)
	if err := put(cli, "k", "v"); err != nil {
		t.Fatalf("put through proxy: %v", err)
	}
	if err := getValue(cli, "k", "v"); err != nil {
		t.Fatalf("get through proxy: %v", err)
	}
	direct := c.Client(t, c.DirectEndpoints()...)
	if err := getValue(direct, "k", "v"); err != nil {
		t.Fatalf("get direct: %v", err)
	}

	// Members advertise their proxies, so a client that syncs stays behind them.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	if got := ml.Members[0].ClientURLs; len(got) != 1 || got[0] != m.Endpoint() {
		t.Fatalf("advertised client URLs = %v, want [%s]", got, m.Endpoint())
	}
}

func TestStopRestart(t *testing.T) {
	for _, kill := range []bool{false, true} {
		name := "Stop"
		if kill {
			name = "Kill"
		}
		t.Run(name, func(t *testing.T) {
			c := etcdtest.Start(t)
			m := c.Members()[0]
			cli := c.Client(t)
			if err := put(cli, "before", "1"); err != nil {
				t.Fatalf("put: %v", err)
			}

			start := time.Now()
			if kill {
				m.Kill(t)
			} else {
				m.Stop(t)
			}
			t.Logf("%s took %v", name, time.Since(start))
			if m.Running() || m.Etcd() != nil {
				t.Fatalf("member still running after %s", name)
			}
			_, err := get(cli, "before")
			if !isOutage(err) {
				t.Fatalf("get while stopped: err = %v, want deadline exceeded or unavailable", err)
			}
			t.Logf("get while stopped: %v", err)

			start = time.Now()
			m.Restart(t)
			t.Logf("Restart took %v", time.Since(start))
			if !m.Running() {
				t.Fatalf("member not running after Restart")
			}
			took := eventually(t, 10*time.Second, "read old key after restart", func() error {
				return getValue(cli, "before", "1")
			})
			t.Logf("client recovered %v after Restart", took)
			if err := put(cli, "after", "2"); err != nil {
				t.Fatalf("put after restart: %v", err)
			}
			if err := getValue(cli, "after", "2"); err != nil {
				t.Fatalf("get after restart: %v", err)
			}
		})
	}
}

func TestWatchSurvivesRestart(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	cli := c.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := cli.Watch(ctx, "w", clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("first watch response is not the created notification: %+v", resp)
	}

	start := time.Now()
	m.Stop(t)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Stop with an open watch took %v, want it not to wait for the request timeout", took)
	}
	m.Restart(t)
	eventually(t, 10*time.Second, "put after restart", func() error { return put(cli, "w", "x") })

	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case resp, ok := <-wch:
		if !ok || resp.Err() != nil || len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != "x" {
			t.Fatalf("watch after restart: ok=%v resp=%+v err=%v", ok, resp, resp.Err())
		}
	case <-timer.C:
		t.Fatalf("watch opened before Stop got no event within 10s after Restart")
	}
}

func TestDelay(t *testing.T) {
	c := etcdtest.Start(t)
	m := c.Members()[0]
	cli := c.Client(t)
	if err := put(cli, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}

	const d = 200 * time.Millisecond
	m.Delay(d)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := cli.Get(ctx, "k"); err != nil {
		t.Fatalf("get while delayed: %v", err)
	}
	delayed := time.Since(start)
	if delayed < 2*d {
		t.Fatalf("get with Delay(%v) took %v, want at least a round trip of %v", d, delayed, 2*d)
	}

	// Heal ends the delay at once, even for chunks the proxy holds.
	m.Heal()
	eventually(t, 5*time.Second, "fast get after Heal", func() error {
		start := time.Now()
		if err := getValue(cli, "k", "v"); err != nil {
			return err
		}
		if took := time.Since(start); took >= d/2 {
			return fmt.Errorf("get took %v, want less than %v", took, d/2)
		}
		return nil
	})
	t.Logf("get took %v with Delay(%v)", delayed, d)
}

func TestThreeMembers(t *testing.T) {
	start := time.Now()
	c := etcdtest.Start(t, etcdtest.WithSize(3))
	t.Logf("3-member cluster started in %v", time.Since(start))
	members := c.Members()
	if len(members) != 3 || len(c.Endpoints()) != 3 || len(c.DirectEndpoints()) != 3 {
		t.Fatalf("got %d members, %d endpoints, %d direct endpoints; want 3 each",
			len(members), len(c.Endpoints()), len(c.DirectEndpoints()))
	}
	cli := c.Client(t)
	if err := put(cli, "k", "v1"); err != nil {
		t.Fatalf("put: %v", err)
	}

	old := c.WaitLeader(t)
	start = time.Now()
	members[old].Kill(t)
	lead := c.WaitLeader(t)
	t.Logf("new leader %s elected %v after killing leader %s", members[lead].Name(), time.Since(start), members[old].Name())
	if lead == old {
		t.Fatalf("WaitLeader() = %d, the killed member", lead)
	}
	eventually(t, 10*time.Second, "put after leader kill", func() error { return put(cli, "k", "v2") })

	members[old].Restart(t)
	c.WaitLeader(t)
	for _, m := range members {
		if !m.Running() {
			t.Fatalf("member %s not running", m.Name())
		}
		// A linearizable read through each member's own proxy.
		mcli := c.Client(t, m.Endpoint())
		eventually(t, 10*time.Second, "read through "+m.Name(), func() error { return getValue(mcli, "k", "v2") })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	if len(ml.Members) != 3 {
		t.Fatalf("member list has %d members, want 3", len(ml.Members))
	}

	// A graceful Stop of the leader hands leadership over.
	old = c.WaitLeader(t)
	start = time.Now()
	members[old].Stop(t)
	lead = c.WaitLeader(t)
	t.Logf("graceful Stop of leader %s took %v, new leader %s", members[old].Name(), time.Since(start), members[lead].Name())
	if lead == old {
		t.Fatalf("WaitLeader() = %d, the stopped member", lead)
	}
	eventually(t, 10*time.Second, "put after leader stop", func() error { return put(cli, "k", "v3") })
}

// Stopping a member aborts its streams in a way that must not hide the
// reasons etcd itself gives, such as losing the leader.
func TestWatchNoLeader(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.WithSize(3))
	ms := c.Members()
	cli := c.Client(t, ms[0].Endpoint())
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	defer cancel()
	wch := cli.Watch(ctx, "w", clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("first watch response is not the created notification: %+v", resp)
	}
	ms[1].Kill(t)
	ms[2].Kill(t)

	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case resp := <-wch:
		if !errors.Is(resp.Err(), rpctypes.ErrNoLeader) {
			t.Fatalf("watch requiring a leader ended with %v, want %v", resp.Err(), rpctypes.ErrNoLeader)
		}
	case <-timer.C:
		t.Fatalf("watch requiring a leader not cancelled within 10s of losing quorum")
	}
}

func TestCompact(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	if err := put(cli, "k", "v1"); err != nil {
		t.Fatalf("put: %v", err)
	}
	resp, err := get(cli, "k")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	oldRev := resp.Header.Revision
	if err := put(cli, "k", "v2"); err != nil {
		t.Fatalf("put: %v", err)
	}

	c.Compact(t)
	if _, err := get(cli, "k", clientv3.WithRev(oldRev)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("get at revision %d after Compact: err = %v, want %v", oldRev, err, rpctypes.ErrCompacted)
	}
	if err := getValue(cli, "k", "v2"); err != nil {
		t.Fatalf("get latest after Compact: %v", err)
	}
	c.Compact(t) // nothing new to compact: not an error
}

func TestWatcherCount(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	before := etcdtest.WatcherCount(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := cli.Watch(ctx, "w")
	eventually(t, 5*time.Second, "watcher count +1", func() error {
		if got := etcdtest.WatcherCount(t); got != before+1 {
			return fmt.Errorf("WatcherCount() = %v, want %v", got, before+1)
		}
		return nil
	})

	cancel()
	for range wch { // drain until the client closes the channel
	}
	eventually(t, 5*time.Second, "watcher count back", func() error {
		if got := etcdtest.WatcherCount(t); got != before {
			return fmt.Errorf("WatcherCount() = %v, want %v", got, before)
		}
		return nil
	})
}

func TestCloseIdempotent(t *testing.T) {
	c := etcdtest.Start(t)
	cli := c.Client(t)
	m := c.Members()[0]
	m.Stall() // Close must not hang on a stalled connection
	c.Close()
	c.Close()
	if m.Running() {
		t.Fatalf("member running after Close")
	}
	if cli.Ctx().Err() == nil {
		t.Fatalf("client made by Client not closed by Close")
	}
}

// fatalTB records the message of a Fatalf call and ends the goroutine.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestWithSizeInvalid(t *testing.T) {
	for _, n := range []int{0, 2, 5} {
		f := &fatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			etcdtest.Start(f, etcdtest.WithSize(n))
		}()
		<-done
		if !strings.Contains(f.msg, "unsupported cluster size") {
			t.Errorf("Start(WithSize(%d)): Fatalf message %q, want one about the unsupported size", n, f.msg)
		}
	}
}
