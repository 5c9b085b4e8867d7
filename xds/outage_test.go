package xds_test

import (
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/xds"
)

// While etcd is down for 10 s the control plane keeps serving its last
// state, and after a control-plane restart clients keep theirs until the
// new one answers: no call fails, and changes flow again afterwards.
func TestOutages(t *testing.T) {
	e := newEnv(t, xds.WithServices("greeter"))
	a, b, c := testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)
	e.register(t, "greeter", "a", a.Addr, "", 0, false)
	e.register(t, "greeter", "b", b.Addr, "", 0, false)
	conn := e.dial(t, "greeter", "client-1", "")
	callUntil(t, conn, "calling a and b", hasAll(a.Addr, b.Addr))

	load := testbackend.StartLoad(conn, 2)
	finished := false
	t.Cleanup(func() {
		if !finished {
			load.Finish()
		}
	})

	m := e.c.Members()[0]
	m.Stop(t)
	downAt := time.Now()
	time.Sleep(10 * time.Second) // the outage being tested
	aBefore, bBefore := load.Calls(a.Addr), load.Calls(b.Addr)
	load.WaitForMore(t, a.Addr, 10)
	load.WaitForMore(t, b.Addr, 10)
	m.Restart(t)
	if err := e.reg.WaitRegistered(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatalf("the registrar did not recover after etcd came back: %v", err)
	}
	t.Logf("etcd down %v; a and b served %d and %d calls by its end", time.Since(downAt).Round(time.Second), aBefore, bBefore)

	// The control plane restarts on the same address; the client keeps
	// its endpoints meanwhile and then follows the new one.
	e.stopCP()
	load.WaitForMore(t, a.Addr, 10)
	load.WaitForMore(t, b.Addr, 10)
	e.startControlPlane(t, xds.WithServices("greeter"))
	e.register(t, "greeter", "c", c.Addr, "", 0, false)
	load.WaitFor(t, c.Addr)

	total, failures := load.Finish()
	finished = true
	if len(failures) > 0 {
		t.Fatalf("%d of %d calls failed through the outages; first: %v", len(failures), total, failures[0])
	}
	t.Logf("%d calls, 0 failed", total)
	noNACK(t, e.cp)
}
