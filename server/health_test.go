package server_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
)

// drainWithin is how soon after its health turns NOT_SERVING a server
// takes no new calls from any client.
const drainWithin = time.Second

// awaitNoCallsTo makes calls on conn until none of quiet consecutive ones
// reaches addr, failing the test if that takes longer than within; it
// returns how long it took.
func awaitNoCallsTo(t *testing.T, conn *grpc.ClientConn, addr string, within time.Duration) time.Duration {
	t.Helper()
	const quiet = 100
	begun := time.Now()
	for run := 0; run < quiet; {
		if time.Since(begun) > within {
			t.Fatalf("calls still reached %s %v after it was drained", addr, within)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := testbackend.Call(ctx, conn)
		cancel()
		switch {
		case err != nil:
			t.Fatalf("call while %s drains: %v", addr, err)
		case got == addr:
			run = 0
		default:
			run++
		}
	}
	return time.Since(begun)
}

// assertNoCallsTo makes n calls on conn and fails if one reaches addr.
func assertNoCallsTo(t *testing.T, conn *grpc.ClientConn, addr string, n int, why string) {
	t.Helper()
	if c := testbackend.Calls(t, conn, n); c[addr] > 0 {
		t.Fatalf("%d of %d calls reached %s, %s", c[addr], n, addr, why)
	}
}

func setHealth(b *backend, st healthpb.HealthCheckResponse_ServingStatus) {
	b.s.Health().SetServingStatus("", st)
}

// awaitOwnValue waits until the instance's own value in etcd (not the
// override) satisfies cond; cond(nil) is asked of an absent key.
func awaitOwnValue(t *testing.T, e *env, id, what string, cond func(*registry.Instance) bool) {
	t.Helper()
	key := registry.Key(registry.DefaultPrefix, "greeter", id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	is := func(val []byte, present bool) bool {
		if !present {
			return cond(nil)
		}
		in, err := registry.Unmarshal(val)
		return err == nil && cond(&in)
	}
	if len(resp.Kvs) == 1 && is(resp.Kvs[0].Value, true) || len(resp.Kvs) == 0 && is(nil, false) {
		return
	}
	for wr := range e.cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		for _, ev := range wr.Events {
			if is(ev.Kv.Value, ev.Type == clientv3.EventTypePut) {
				return
			}
		}
	}
	t.Fatalf("%s's own value in etcd was not %s within 10s", id, what)
}

// twoGreeters starts greeters a and b and a client (muster_p2c, no
// client-side health checks) that has called both; it returns a and its
// address.
func twoGreeters(t *testing.T) (*env, *backend, string, *grpc.ClientConn) {
	t.Helper()
	e := newEnv(t)
	a, b := e.start(t, "a"), e.start(t, "b")
	conn := dial(t, e, "muster:///greeter")
	testbackend.CallUntil(t, conn, 10*time.Second, "calling both", testbackend.HasAll(a.s.Instance().Addr, b.s.Instance().Addr))
	return e, a, a.s.Instance().Addr, conn
}

// TestHealthDrainsInTheRegistry: a server whose overall health turns
// NOT_SERVING takes no new calls from a client balancing on the registry
// (muster_p2c, no client-side health checks) within drainWithin, and
// takes calls again once SERVING. Without followHealth the client keeps
// calling it. The quiet calls are counted once the drain is in the
// client's Discovery: before it, p2c may send a run of calls to the other
// server on its own (it prefers the one that answered faster), which
// says nothing of the drain.
func TestHealthDrainsInTheRegistry(t *testing.T) {
	e, a, addrA, conn := twoGreeters(t)
	w := watchGreeter(t, e) // the Discovery the client's resolver follows

	setHealth(a, healthpb.HealthCheckResponse_NOT_SERVING)
	begun := time.Now()
	registrytest.WaitForWithin(t, w, drainWithin, "a drained or gone", func(s registry.Snapshot) bool {
		for _, in := range s.Instances {
			if in.ID == "a" {
				return in.Draining
			}
		}
		return true
	})
	awaitNoCallsTo(t, conn, addrA, drainWithin-time.Since(begun))
	t.Logf("no new calls to the NOT_SERVING server %v after its health changed", time.Since(begun).Round(time.Millisecond))
	assertNoCallsTo(t, conn, addrA, 100, "which is NOT_SERVING")

	setHealth(a, healthpb.HealthCheckResponse_SERVING)
	testbackend.CallUntil(t, conn, 10*time.Second, "calling a again once SERVING", testbackend.HasAll(addrA))
}

// TestHealthNeverUndoesAnOperatorDrain: an instance an operator drained
// (muster drain: a weight-0 override) stays drained through its health
// turning NOT_SERVING and SERVING again. Without the override surviving
// the instance's own writes, SERVING gives it calls again.
func TestHealthNeverUndoesAnOperatorDrain(t *testing.T) {
	e, a, addrA, conn := twoGreeters(t)

	zero := 0
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := etcd.SetOverride(ctx, e.cli, "greeter", "a", registry.Override{Weight: &zero}); err != nil {
		t.Fatal(err)
	}
	awaitNoCallsTo(t, conn, addrA, 10*time.Second)

	setHealth(a, healthpb.HealthCheckResponse_NOT_SERVING)
	awaitOwnValue(t, e, "a", "drained or gone", func(in *registry.Instance) bool { return in == nil || in.Draining })
	setHealth(a, healthpb.HealthCheckResponse_SERVING)
	awaitOwnValue(t, e, "a", "undrained", func(in *registry.Instance) bool { return in != nil && !in.Draining })
	// The instance wrote itself undrained; every Discovery has that write
	// once a later one reaches it.
	c := e.start(t, "c")
	testbackend.CallUntil(t, conn, 10*time.Second, "calling c", testbackend.HasAll(c.s.Instance().Addr))
	assertNoCallsTo(t, conn, addrA, 100, "which the operator drained and its health SERVING again must not undrain")
}
