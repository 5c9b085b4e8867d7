package served

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

type fixedWatcher struct{ snap registry.Snapshot }

func (w *fixedWatcher) Updates() <-chan struct{}    { return nil }
func (w *fixedWatcher) Snapshot() registry.Snapshot { return w.snap }
func (w *fixedWatcher) Close() error                { return nil }

type discard struct{}

func (discard) Serve(List) {}
func (discard) Fail(error) {}

// copyBuild stands in for a consumer's Build: one array of the list's
// length, filled.
func copyBuild(list []*registry.Instance, _ *Chosen) any {
	out := make([]*registry.Instance, len(list))
	copy(out, list)
	return out
}

// benchFollower returns a follower of target t over w, with cfg's
// defaults, sharing states.
func benchFollower(w registry.Watcher, t Target, states *targetStates, cfg Config) *Follower {
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Build = copyBuild
	p := New(nil, cfg)
	return &Follower{p: p, c: discard{}, t: t, w: w, states: states, log: cfg.Logger,
		state: followState{protect: newProtection(cfg.ProtectFraction, cfg.ProtectWindow), grace: grace{period: cfg.DeletionGrace}}}
}

// BenchmarkFollowerUpdate measures a follower's work for one snapshot of a
// service of n instances that differs from the previous one by one
// instance (alternately added and removed): protection, the deletion
// grace, filters, subsetting, and the list handed to the consumer (here
// one that discards it; its Build copies the list). "100-followers" is the
// same change delivered to 100 followers of one target (as the target's
// feed does).
func BenchmarkFollowerUpdate(b *testing.B) {
	for _, n := range []int{150, 1000, 10000, 20000} {
		all := registrytest.Numbered(n)
		// "follower" adds and removes the last instance, "middle" the one
		// in the middle (the instances after it must still be matched by
		// pointer, not compared field by field); "filtered" is "follower"
		// on a target with a version filter that half the instances match,
		// "subset" with subsetting to 25 instances: the passes that are
		// still O(n) per change (once per target, however many followers
		// it has).
		for _, where := range []string{"follower", "middle", "filtered", "subset"} {
			b.Run(fmt.Sprintf("instances=%d/%s", n, where), func(b *testing.B) {
				t := Target{Service: "svc"}
				cfg := Defaults()
				switch where {
				case "filtered":
					t.Version = "v0"
				case "subset":
					cfg.SubsetSize, cfg.ClientID = 25, "bench-client"
				}
				benchOneFollower(b, all, n, where == "middle", t, cfg)
			})
		}
		b.Run(fmt.Sprintf("instances=%d/100-followers", n), func(b *testing.B) {
			w := &fixedWatcher{}
			states := &targetStates{}
			fs := make([]*Follower, 100)
			for k := range fs {
				fs[k] = benchFollower(w, Target{Service: "svc"}, states, Defaults())
			}
			var lists [4][]*registry.Instance
			for k := range lists {
				lists[k] = slices.Clone(all[:n+k%2])
			}
			w.snap = registry.Snapshot{Loaded: true, Instances: lists[len(lists)-1]}
			for _, f := range fs {
				f.update(time.Now(), w.snap) // the lists are built before the loop
			}
			for i := 0; b.Loop(); i++ {
				w.snap = registry.Snapshot{Loaded: true, Revision: int64(i + 1), Instances: lists[i%len(lists)]}
				for _, f := range fs {
					f.update(time.Now(), w.snap)
				}
			}
		})
	}
}

// benchOneFollower is one follower's work per change: n instances, one
// more or one fewer, at the end or in the middle, on target t.
func benchOneFollower(b *testing.B, all []*registry.Instance, n int, middle bool, t Target, cfg Config) {
	w := &fixedWatcher{}
	f := benchFollower(w, t, &targetStates{}, cfg)
	// Each snapshot is a list of its own, as the Discovery publishes
	// (the unchanged instances are the same pointers): four in turn, so
	// that no list chosen before is found again.
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
	f.update(time.Now(), w.snap) // the list is built before the loop
	for i := 0; b.Loop(); i++ {
		w.snap = registry.Snapshot{Loaded: true, Revision: int64(i + 1), Instances: lists[i%len(lists)]}
		f.update(time.Now(), w.snap)
	}
}
