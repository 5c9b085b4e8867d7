package resolver

import (
	"slices"
	"testing"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

// FuzzEndpointsMatchRebuild builds the endpoints of a sequence of lists
// (instances added, removed, changed; an older list served again, as
// protection does), each from the one built before, as the pipeline does
// for a target (served.Config.Build), and checks every one against a full
// rebuild: each instance with the endpoint endpointOf makes for it. It
// checks too that the endpoint of an instance unchanged since the previous
// list is that list's (not made again), and that no array handed out is
// written afterwards, though each is prepared for the next list.
func FuzzEndpointsMatchRebuild(f *testing.F) {
	f.Add(byte(0), []byte{0, 4, 8, 2, 1, 2, 12, 2, 3, 2})
	f.Add(byte(7), []byte{0, 4, 8, 12, 16, 20, 2, 5, 2, 0, 2, 3, 7, 2})
	f.Add(byte(2), []byte{2, 0, 4, 2, 2, 9, 13, 2, 11, 2})
	f.Fuzz(func(t *testing.T, q byte, ops []byte) {
		type handed struct {
			c     *served.Chosen
			addrs []string // what the state held when handed out
		}
		var out []handed
		var prev *served.Chosen
		registrytest.ListSequence(ops, func(list []*registry.Instance) {
			c := &served.Chosen{From: list, Instances: list, Built: buildEndpoints(list, prev)}
			checkRebuild(t, c, list)
			if prev != nil {
				checkReused(t, c, prev)
			}
			e := c.Built.(*endpoints)
			if q&1 != 0 {
				e.prepare() // as a push does
			}
			h := handed{c: c}
			for _, a := range e.addrs {
				h.addrs = append(h.addrs, a.Addr)
			}
			out = append(out, h)
			prev = c
		})
		for i, h := range out {
			e := h.c.Built.(*endpoints)
			for j := range h.addrs {
				if e.addrs[j].Addr != h.addrs[j] || e.eps[j].Addresses[0].Addr != h.addrs[j] {
					t.Fatalf("state %d, entry %d written after it was handed out", i, j)
				}
			}
		}
	})
}

// checkRebuild checks c's endpoints against the instances want and the
// endpoints endpointOf makes for them.
func checkRebuild(t *testing.T, c *served.Chosen, want []*registry.Instance) {
	t.Helper()
	e := c.Built.(*endpoints)
	if len(e.eps) != len(want) || len(e.addrs) != len(want) || cap(e.eps) != len(want) || cap(e.addrs) != len(want) {
		t.Fatalf("%d/%d endpoints, %d/%d addresses (len/cap); a rebuild makes %d",
			len(e.eps), cap(e.eps), len(e.addrs), cap(e.addrs), len(want))
	}
	for i, in := range want {
		got, ok := InstanceOf(e.eps[i])
		full := endpointOf(in)
		if !ok || !got.Equal(*in) || !e.eps[i].Attributes.Equal(full.Attributes) ||
			len(e.eps[i].Addresses) != 1 || e.eps[i].Addresses[0].Addr != in.Addr {
			t.Fatalf("endpoint %d: %+v, a rebuild makes %+v", i, e.eps[i], full)
		}
		if a := e.addrs[i]; !a.Equal(full.Addresses[0]) {
			t.Fatalf("address %d: %+v, a rebuild makes %+v", i, a, full.Addresses[0])
		}
	}
}

// checkReused checks that each instance of c that prev holds (the same
// pointer) has prev's endpoint.
func checkReused(t *testing.T, c, prev *served.Chosen) {
	t.Helper()
	e, pe := c.Built.(*endpoints), prev.Built.(*endpoints)
	for i, in := range c.Instances {
		j := slices.Index(prev.Instances, in)
		if j >= 0 && !sameEndpoint(e.eps[i], pe.eps[j]) {
			t.Fatalf("endpoint of unchanged instance %s made again", in.ID)
		}
	}
}

// sameEndpoint reports whether a and b are the same endpoint value (not
// merely equal ones).
func sameEndpoint(a, b grpcresolver.Endpoint) bool {
	return a.Attributes == b.Attributes && &a.Addresses[0] == &b.Addresses[0]
}
