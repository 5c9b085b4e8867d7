package served

import (
	"testing"

	"github.com/musterhq/muster/internal/testkit/registrytest"
	"github.com/musterhq/muster/registry"
)

// FuzzSharedStateMatchesRebuild drives a target's shared lists with a
// sequence of served lists (instances added, removed, changed; an older
// list served again, as protection does) under filters and subsetting
// chosen by the input, and checks every Chosen against a full rebuild: the
// instances the target's filters and subsetting choose from the list. It
// checks too that a choice equal to the previous one keeps its instances
// and its build (followers recognise it by identity), that another is
// built from the previous one, and that a list served again is the same
// Chosen while it is one of the two recent ones.
func FuzzSharedStateMatchesRebuild(f *testing.F) {
	f.Add(byte(0), []byte{0, 4, 8, 2, 1, 2, 12, 2, 3, 2})
	f.Add(byte(7), []byte{0, 4, 8, 12, 16, 20, 2, 5, 2, 0, 2, 3, 7, 2})
	f.Add(byte(2), []byte{2, 0, 4, 2, 2, 9, 13, 2, 11, 2})
	f.Fuzz(func(t *testing.T, q byte, ops []byte) {
		fl := fuzzFollower(q)
		type build struct {
			list []*registry.Instance
			prev *Chosen
		}
		registrytest.ListSequence(ops, func(from []*registry.Instance) {
			recent := fl.states.recent
			var built *build
			c := fl.states.state(from, fl.choose, func(list []*registry.Instance, prev *Chosen) any {
				built = &build{list: list, prev: prev}
				return built
			})
			want := fl.choose(from)
			if !registry.EqualInstances(c.Instances, want) {
				t.Fatalf("chose %d instances, a rebuild chooses %d", len(c.Instances), len(want))
			}
			switch {
			case recent[0] != nil && sameList(recent[0].From, from):
				if c != recent[0] {
					t.Fatal("the newest list served again was chosen again")
				}
			case recent[1] != nil && sameList(recent[1].From, from):
				if c != recent[1] {
					t.Fatal("the previous list served again was chosen again")
				}
			case recent[0] != nil && registry.EqualInstances(want, recent[0].Instances):
				if built != nil || !sameList(c.Instances, recent[0].Instances) || c.Built != recent[0].Built {
					t.Fatal("an unchanged choice was built again")
				}
			default:
				if built == nil || c.Built != built || built.prev != recent[0] || !sameList(built.list, c.Instances) {
					t.Fatalf("a new choice was not built from the newest one: %+v", built)
				}
			}
		})
	})
}

// fuzzFollower returns a follower whose filters and subsetting q selects.
func fuzzFollower(q byte) *Follower {
	cfg := Config{ClientID: "client-1", ZoneFallback: q&8 != 0}
	if q&4 != 0 {
		cfg.SubsetSize = 3
	}
	f := &Follower{p: New(nil, cfg), states: &targetStates{}}
	if q&1 != 0 {
		f.t.Version = "v1"
	}
	if q&2 != 0 {
		f.t.Zone = "z1"
	}
	if q&16 != 0 {
		f.t.Metadata = map[string]string{"color": "blue"}
	}
	return f
}
