package resolver

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/registry"
)

type fixedWatcher struct{ snap registry.Snapshot }

func (w *fixedWatcher) Updates() <-chan struct{}    { return nil }
func (w *fixedWatcher) Snapshot() registry.Snapshot { return w.snap }
func (w *fixedWatcher) Close() error                { return nil }

type discardCC struct{ grpcresolver.ClientConn }

func (discardCC) UpdateState(grpcresolver.State) error { return nil }

// BenchmarkResolverUpdate measures a resolver's work for one snapshot of a
// service of n instances that differs from the previous one by one
// instance (alternately added and removed): protection, filters, endpoint
// reuse and the state handed to the channel (here one that discards it).
// "100-channels" is the same change delivered to 100 channels of one
// target (as the target's feed does). Beside them, in the same run,
// "copy" is the part gRPC requires: fresh
// arrays of n endpoints and n addresses filled from endpoints already
// made (allocation, zeroing, copy), as a state handed to a channel must not
// be written again.
func BenchmarkResolverUpdate(b *testing.B) {
	for _, n := range []int{150, 1000, 10000, 20000} {
		all := make([]*registry.Instance, n+1)
		for i := range all {
			all[i] = &registry.Instance{Name: "svc", ID: fmt.Sprintf("%06d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i%40000),
				Weight: 100, Version: fmt.Sprintf("v%d", i%2)}
		}
		// "resolver" adds and removes the last instance, "resolver-middle"
		// the one in the middle (the instances after it must still be
		// matched by pointer, not compared field by field);
		// "resolver-filtered" is "resolver" on a target with a version
		// filter that half the instances match, "resolver-subset" with
		// subsetting to 25 instances: the passes that are still O(n) per
		// change (once per target, however many channels follow it).
		for _, where := range []string{"resolver", "resolver-middle", "resolver-filtered", "resolver-subset"} {
			b.Run(fmt.Sprintf("instances=%d/%s", n, where), func(b *testing.B) {
				var q query
				var opts []Option
				switch where {
				case "resolver-filtered":
					q.version = "v0"
				case "resolver-subset":
					opts = append(opts, WithSubset(25), WithClientID("bench-client"))
				}
				benchOneChannel(b, all, n, where == "resolver-middle", q, opts...)
			})
		}
		b.Run(fmt.Sprintf("instances=%d/100-channels", n), func(b *testing.B) {
			w := &fixedWatcher{}
			bld := NewBuilder(nil, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			t := &targetStates{}
			chans := make([]*musterResolver, 100)
			for k := range chans {
				chans[k] = &musterResolver{b: bld, cc: discardCC{}, w: w, log: bld.log, states: t,
					protect: newProtection(bld.opts.protectFraction, bld.opts.protectWindow)}
			}
			var lists [4][]*registry.Instance
			for k := range lists {
				lists[k] = slices.Clone(all[:n+k%2])
			}
			w.snap = registry.Snapshot{Loaded: true, Instances: lists[len(lists)-1]}
			for _, r := range chans {
				r.update(time.Now(), w.snap) // the endpoints are made before the loop
			}
			for i := 0; b.Loop(); i++ {
				w.snap = registry.Snapshot{Loaded: true, Revision: int64(i + 1), Instances: lists[i%len(lists)]}
				for _, r := range chans {
					r.update(time.Now(), w.snap)
				}
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

// benchOneChannel is one channel's work per change: n instances, one
// more or one fewer, at the end or in the middle, on target q.
func benchOneChannel(b *testing.B, all []*registry.Instance, n int, middle bool, q query, opts ...Option) {
	w := &fixedWatcher{}
	bld := NewBuilder(nil, append([]Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	r := &musterResolver{b: bld, cc: discardCC{}, w: w, log: bld.log, states: &targetStates{}, q: q,
		protect: newProtection(bld.opts.protectFraction, bld.opts.protectWindow)}
	// Each snapshot is a list of its own, as the Discovery publishes
	// (the unchanged instances are the same pointers): four in turn, so
	// that no state built before is found again.
	var lists [4][]*registry.Instance
	for k := range lists {
		switch {
		case k%2 == 0:
			lists[k] = slices.Clone(all[:n])
		case middle:
			lists[k] = slices.Concat(all[:n/2], all[n/2+1:n+1])
		default:
			lists[k] = slices.Clone(all[:n+1])
		}
	}
	w.snap = registry.Snapshot{Loaded: true, Instances: lists[len(lists)-1]}
	r.update(time.Now(), w.snap) // the endpoints are made before the loop
	for i := 0; b.Loop(); i++ {
		w.snap = registry.Snapshot{Loaded: true, Revision: int64(i + 1), Instances: lists[i%len(lists)]}
		r.update(time.Now(), w.snap)
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
	r := &musterResolver{b: bld, cc: cc, log: bld.log, states: &targetStates{}}
	lists := [][]*registry.Instance{all[:10], all[:11], all[5:11], all[:40], all[:3], all[:3:3], all[1:4]}
	for _, l := range lists {
		r.push(r.states.state(l, r.choose))
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
			if !sameList(lists[k], l) && len(l) > 0 && len(lists[k]) > 0 &&
				(&s.Endpoints[0] == &cc.states[k].Endpoints[0] || &s.Addresses[0] == &cc.states[k].Addresses[0]) {
				t.Fatalf("states %d and %d share an array", k, i)
			}
		}
	}
}
