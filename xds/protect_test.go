package xds_test

import (
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/etcdopts"
	"github.com/musterhq/muster/internal/testkit/testbackend"
	"github.com/musterhq/muster/registry"
	"github.com/musterhq/muster/registry/etcd"
	"github.com/musterhq/muster/xds"
)

// Empty-list protection, with the resolver's semantics, is applied before
// publishing: when three of four instances vanish from the registry at once
// (their lease revoked while the servers run), xDS clients keep all four;
// with protection disabled they keep one.
func TestProtection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []xds.Option
		protect bool
	}{
		{"default", nil, true},
		{"disabled", []xds.Option{xds.WithProtection(0, time.Minute)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, append([]xds.Option{xds.WithServices("greeter")}, tc.opts...)...)
			other, err := etcd.NewRegistrar(e.cli, etcdopts.Registrar()...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = other.Close() })
			bes := []*testbackend.Backend{testbackend.Start(t), testbackend.Start(t), testbackend.Start(t), testbackend.Start(t)}
			e.register(t, "greeter", "a", bes[0].Addr, "", 0, false)
			for i, be := range bes[1:] {
				in := registry.Instance{Name: "greeter", ID: string(rune('b' + i)), Addr: be.Addr}
				if err := other.Register(ctxFor(t, 10*time.Second), in); err != nil {
					t.Fatal(err)
				}
			}
			conn := e.dial(t, "greeter", "client-1", "")
			callUntil(t, conn, "calling all four", hasAll(bes[0].Addr, bes[1].Addr, bes[2].Addr, bes[3].Addr))

			if err := other.Close(); err != nil { // revokes b, c and d at once
				t.Fatal(err)
			}
			if tc.protect {
				waitStats(t, e.cp, "the loss withheld", func(st xds.Stats) bool { return st.Protected > 0 })
				if got := calls(t, conn, 200); got[bes[1].Addr] == 0 {
					t.Fatalf("with protection, b got no call after the loss: %v", got)
				}
				return
			}
			missUntil(t, conn, bes[1].Addr, 100)
			if got := calls(t, conn, 200); got[bes[0].Addr] != 200 {
				t.Fatalf("without protection: %v, want a only", got)
			}
		})
	}
}
