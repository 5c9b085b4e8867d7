package xds_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/xds"
)

// A service whose instances and keys are all gone from the registry is
// unpublished once its empty list has been published for WithForgetAfter,
// and no longer followed, so the set of followed services does not grow
// with every name ever registered. grpc-go clients watching it (with and
// without ignore_resource_deletion in the bootstrap) fail their calls with
// Unavailable, and are served again when it comes back. A service whose
// keys remain (here: a value the Discovery cannot decode, so no instance)
// is not forgotten.
func TestForgetGone(t *testing.T) {
	e := newEnv(t, xds.WithListInterval(50*time.Millisecond), xds.WithForgetAfter(300*time.Millisecond),
		xds.WithProtection(0, time.Minute))
	a, b := testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	if _, err := e.cli.Put(ctxFor(t, 10*time.Second), registry.Key(registry.DefaultPrefix, "stuck", "x"), "not an instance"); err != nil {
		t.Fatal(err)
	}
	const churn = 10
	name := func(i int) string { return fmt.Sprintf("churn-%02d", i) }
	for i := range churn {
		e.register(t, name(i), "a", a.Addr, "", 0, false)
	}
	keep := e.dial(t, "greeter", "keeps-deleted", "")
	// A bootstrap without the server feature ignore_resource_deletion
	// (muster xds-bootstrap always writes it).
	r, err := newResolver(fmt.Sprintf(`{"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}],
  "server_features": ["xds_v3"]}], "node": {"id": "drops-deleted", "locality": {}}}`, e.addr))
	if err != nil {
		t.Fatal(err)
	}
	drop := dialWith(t, r, "greeter")
	callUntil(t, keep, "calling a (ignore_resource_deletion)", hasAll(a.Addr))
	callUntil(t, drop, "calling a (without ignore_resource_deletion)", hasAll(a.Addr))
	waitStats(t, e.cp, "every service published", func(st xds.Stats) bool { return st.Services == churn+2 })

	e.deregister(t, "greeter", "a")
	for i := range churn {
		e.deregister(t, name(i), "a")
	}
	st := waitStats(t, e.cp, "the gone services forgotten", func(st xds.Stats) bool { return st.Forgotten == churn+1 })
	// "stuck" had been empty for longer than greeter: had it been
	// forgettable, the same listing would have forgotten it.
	if got := fmt.Sprint(e.cp.Services()); got != "[stuck]" || st.Services != 1 {
		t.Errorf("followed %s, %d published, want [stuck] (listed, so kept), 1 published", got, st.Services)
	}
	// The client that keeps deleted resources keeps greeter's empty
	// endpoints (measured: "no targets to pick from"); the other one
	// drops the listener.
	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
		want string
	}{
		{"with ignore_resource_deletion", keep, ""}, // any error: it has no endpoints
		{"without ignore_resource_deletion", drop, `resource "greeter" of type "ListenerResource" has been removed`},
	} {
		err := failsWith(t, c.conn, c.want)
		t.Logf("client %s, greeter forgotten: %v", c.name, err)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("client %s: call error %v, want Unavailable", c.name, err)
		}
	}

	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	callUntil(t, keep, "calling b once greeter is back (ignore_resource_deletion)", hasAll(b.Addr))
	callUntil(t, drop, "calling b once greeter is back (without ignore_resource_deletion)", hasAll(b.Addr))
	noNACK(t, e.cp)
}

// failsWith calls conn until a call fails with an error containing want
// (any error if want is empty), for at most 15 s, and returns the error.
func failsWith(t *testing.T, conn *grpc.ClientConn, want string) error {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = testbackend.Call(ctx, conn)
		cancel()
		if err != nil && strings.Contains(err.Error(), want) {
			return err
		}
	}
	t.Fatalf("after 15s, calls still do not fail with %q; last error %v", want, err)
	return nil
}
