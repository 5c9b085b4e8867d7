package resolver

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
)

// FuzzSharedStateMatchesRebuild drives a target's shared states with a
// sequence of lists (instances added, removed, changed; an older list served
// again, as protection does) under filters and subsetting chosen by the
// input, and checks every state against a full rebuild: the instances the
// target's filters and subsetting choose from the list, each with the
// endpoint endpointOf makes for it. It checks too that the endpoint of an
// instance unchanged since the previous state is that state's (not made
// again), and that no array handed out is written afterwards.
func FuzzSharedStateMatchesRebuild(f *testing.F) {
	f.Add(byte(0), []byte{0, 4, 8, 2, 1, 2, 12, 2, 3, 2})
	f.Add(byte(7), []byte{0, 4, 8, 12, 16, 20, 2, 5, 2, 0, 2, 3, 7, 2})
	f.Add(byte(2), []byte{2, 0, 4, 2, 2, 9, 13, 2, 11, 2})
	f.Fuzz(func(t *testing.T, q byte, ops []byte) {
		r := fuzzResolver(q)
		const slots = 12
		var cur [slots]*registry.Instance
		var published [][]*registry.Instance
		type handed struct {
			st    *builtState
			addrs []string // what the state held when handed out
		}
		var out []handed
		for n, op := range ops {
			k := int(op/4) % slots
			switch op % 4 {
			case 0: // an instance comes or goes
				if cur[k] != nil {
					cur[k] = nil
				} else {
					cur[k] = fuzzInstance(k, n)
				}
				continue
			case 1: // an instance changes (or is re-read equal: a new pointer)
				if cur[k] != nil {
					cur[k] = fuzzInstance(k, n)
				}
				continue
			}
			var from []*registry.Instance
			if op%4 == 2 || len(published) == 0 {
				for _, in := range cur {
					if in != nil {
						from = append(from, in)
					}
				}
				published = append(published, from)
			} else {
				from = published[k%len(published)]
			}
			prev := r.states.recent[0]
			st := r.states.state(from, r.choose)
			checkRebuild(t, st, r.choose(from))
			if prev != nil && st != prev && !sameList(st.list, prev.list) {
				checkReused(t, st, prev)
			}
			h := handed{st: st}
			for _, a := range st.addrs {
				h.addrs = append(h.addrs, a.Addr)
			}
			out = append(out, h)
		}
		for i, h := range out {
			for j := range h.addrs {
				if h.st.addrs[j].Addr != h.addrs[j] || h.st.eps[j].Addresses[0].Addr != h.addrs[j] {
					t.Fatalf("state %d, entry %d written after it was handed out", i, j)
				}
			}
		}
	})
}

// fuzzResolver returns a resolver whose filters and subsetting q selects.
func fuzzResolver(q byte) *musterResolver {
	opts := []Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithClientID("client-1")}
	if q&4 != 0 {
		opts = append(opts, WithSubset(3))
	}
	opts = append(opts, WithZoneFallback(q&8 != 0))
	bld := NewBuilder(nil, opts...)
	r := &musterResolver{b: bld, log: bld.log, states: &targetStates{}}
	if q&1 != 0 {
		r.q.version = "v1"
	}
	if q&2 != 0 {
		r.q.zone = "z1"
	}
	if q&16 != 0 {
		r.q.metadata = map[string]string{"color": "blue"}
	}
	return r
}

// fuzzInstance makes instance k at step n: its version, zone, weight and
// metadata vary with n, and are sometimes those of the step before.
func fuzzInstance(k, n int) *registry.Instance {
	v := n / 2
	return &registry.Instance{
		Name: "svc", ID: fmt.Sprintf("%02d", k), Addr: fmt.Sprintf("127.0.0.1:%d", 1000+k),
		Version: fmt.Sprintf("v%d", 1+v%2), Zone: fmt.Sprintf("z%d", 1+(v/2)%2),
		Weight: 100 + v%3, Metadata: map[string]string{"color": []string{"blue", "green"}[(v/3)%2]},
	}
}

// checkRebuild checks st against the instances want chosen afresh and the
// endpoints endpointOf makes for them.
func checkRebuild(t *testing.T, st *builtState, want []*registry.Instance) {
	t.Helper()
	if len(st.list) != len(want) || len(st.eps) != len(want) || len(st.addrs) != len(want) ||
		cap(st.eps) != len(want) || cap(st.addrs) != len(want) {
		t.Fatalf("state of %d instances, %d/%d endpoints, %d/%d addresses (len/cap); a rebuild chooses %d",
			len(st.list), len(st.eps), cap(st.eps), len(st.addrs), cap(st.addrs), len(want))
	}
	for i, in := range want {
		if !st.list[i].Equal(*in) {
			t.Fatalf("instance %d: %+v, a rebuild chooses %+v", i, *st.list[i], *in)
		}
		got, ok := InstanceOf(st.eps[i])
		full := endpointOf(in)
		if !ok || !got.Equal(*in) || !st.eps[i].Attributes.Equal(full.Attributes) ||
			len(st.eps[i].Addresses) != 1 || st.eps[i].Addresses[0].Addr != in.Addr {
			t.Fatalf("endpoint %d: %+v, a rebuild makes %+v", i, st.eps[i], full)
		}
		if a := st.addrs[i]; !a.Equal(full.Addresses[0]) {
			t.Fatalf("address %d: %+v, a rebuild makes %+v", i, a, full.Addresses[0])
		}
	}
}

// checkReused checks that each instance of st that prev holds (the same
// pointer) has prev's endpoint.
func checkReused(t *testing.T, st, prev *builtState) {
	t.Helper()
	for i, in := range st.list {
		j := slices.Index(prev.list, in)
		if j >= 0 && !sameEndpoint(st.eps[i], prev.eps[j]) {
			t.Fatalf("endpoint of unchanged instance %s made again", in.ID)
		}
	}
}

// sameEndpoint reports whether a and b are the same endpoint value (not
// merely equal ones).
func sameEndpoint(a, b grpcresolver.Endpoint) bool {
	return a.Attributes == b.Attributes && &a.Addresses[0] == &b.Addresses[0]
}
