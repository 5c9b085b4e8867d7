package resolver

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

type discardCC struct{ grpcresolver.ClientConn }

func (discardCC) UpdateState(grpcresolver.State) error { return nil }

// BenchmarkResolverUpdate measures the resolver's own work for one list of
// a service of n instances that differs from the previous one by one
// instance (alternately added and removed): "build" makes the list's
// endpoints from the previous list's (once per target, however many
// channels follow it), "state" hands a built list to a channel (here one
// that discards it), once per channel. Beside them, in the same run,
// "copy" is the part gRPC requires: fresh arrays of n endpoints and n
// addresses filled from endpoints already made (allocation, zeroing,
// copy), as a state handed to a channel must not be written again. The
// pipeline's part (protection, grace, filters, subsetting) is
// internal/served's BenchmarkFollowerUpdate.
func BenchmarkResolverUpdate(b *testing.B) {
	for _, n := range []int{150, 1000, 10000, 20000} {
		all := registrytest.Numbered(n)
		// Each list is one of its own, as the Discovery publishes (the
		// unchanged instances are the same pointers): four in turn.
		var lists [4][]*registry.Instance
		for k := range lists {
			lists[k] = slices.Clone(all[:n+k%2])
		}
		b.Run(fmt.Sprintf("instances=%d/build", n), func(b *testing.B) {
			prev := &served.Chosen{Instances: lists[3], Built: buildEndpoints(lists[3], nil)}
			for i := 0; b.Loop(); i++ {
				l := lists[i%len(lists)]
				c := &served.Chosen{Instances: l, Built: buildEndpoints(l, prev)}
				c.Built.(*endpoints).prepare() // as the first channel's push does
				prev = c
			}
		})
		b.Run(fmt.Sprintf("instances=%d/state", n), func(b *testing.B) {
			bld := NewBuilder(nil, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			r := &musterResolver{b: bld, cc: discardCC{}, log: bld.log}
			var built [4]served.List
			for k, l := range lists {
				built[k] = served.List{Chosen: &served.Chosen{Instances: l, Built: buildEndpoints(l, nil)}}
			}
			for i := 0; b.Loop(); i++ {
				r.Serve(built[i%len(built)])
			}
		})
		b.Run(fmt.Sprintf("instances=%d/copy", n), func(b *testing.B) {
			made := make([]grpcresolver.Endpoint, n+1)
			for i, in := range all {
				made[i] = endpointOf(in)
			}
			cc := discardCC{}
			for i := 0; b.Loop(); i++ {
				m := n + i%2
				eps := make([]grpcresolver.Endpoint, m)
				addrs := make([]grpcresolver.Address, m)
				copy(eps, made)
				for j, ep := range eps {
					addrs[j] = ep.Addresses[0]
				}
				_ = cc.UpdateState(grpcresolver.State{Endpoints: eps, Addresses: addrs})
			}
		})
	}
}

type keepingCC struct {
	grpcresolver.ClientConn
	states []grpcresolver.State
}

func (c *keepingCC) UpdateState(s grpcresolver.State) error {
	c.states = append(c.states, s)
	return nil
}

// A state handed to the channel is never written again: each new list gets
// fresh arrays (prepared after the previous one), capped at their length,
// and the arrays of every state handed over still hold their list after
// all the later ones.
func TestStatesHandedOverAreNeverReused(t *testing.T) {
	all := make([]*registry.Instance, 40)
	for i := range all {
		all[i] = &registry.Instance{Name: "svc", ID: fmt.Sprintf("%03d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1000+i)}
	}
	cc := &keepingCC{}
	bld := NewBuilder(nil, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	r := &musterResolver{b: bld, cc: cc, log: bld.log}
	lists := [][]*registry.Instance{all[:10], all[:11], all[5:11], all[:40], all[:3], all[:3:3], all[1:4]}
	var prev *served.Chosen
	for _, l := range lists {
		c := &served.Chosen{From: l, Instances: l, Built: buildEndpoints(l, prev)}
		r.Serve(served.List{Chosen: c})
		prev = c
	}
	for i, s := range cc.states {
		l := lists[i]
		if len(s.Endpoints) != len(l) || cap(s.Endpoints) != len(l) || len(s.Addresses) != len(l) || cap(s.Addresses) != len(l) {
			t.Fatalf("state %d: %d/%d endpoints, %d/%d addresses (len/cap), want %d", i,
				len(s.Endpoints), cap(s.Endpoints), len(s.Addresses), cap(s.Addresses), len(l))
		}
		for j, in := range l {
			if s.Endpoints[j].Addresses[0].Addr != in.Addr || s.Addresses[j].Addr != in.Addr {
				t.Fatalf("state %d, endpoint %d: %s / %s, want %s (written after it was handed over?)", i, j,
					s.Endpoints[j].Addresses[0].Addr, s.Addresses[j].Addr, in.Addr)
			}
		}
		for k := 0; k < i; k++ {
			if !(len(lists[k]) == len(l) && len(l) > 0 && &lists[k][0] == &l[0]) && len(l) > 0 && len(lists[k]) > 0 &&
				(&s.Endpoints[0] == &cc.states[k].Endpoints[0] || &s.Addresses[0] == &cc.states[k].Addresses[0]) {
				t.Fatalf("states %d and %d share an array", k, i)
			}
		}
	}
}
