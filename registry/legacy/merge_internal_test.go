package legacy

import (
	"errors"
	"testing"
	"time"

	"github.com/musterhq/muster/registry"
)

func TestMergeSnapshots(t *testing.T) {
	muster := &registry.Instance{Name: "svc", ID: "m", Addr: "10.0.0.1:1", Version: "muster"}
	dup := &registry.Instance{Name: "svc", ID: "1", Addr: "10.0.0.1:1", Version: "gozero"}
	other := &registry.Instance{Name: "svc", ID: "m", Addr: "10.0.0.2:1"}
	stale := time.Unix(100, 0)
	names := []string{PrimarySource, "go-zero"}
	var tags tagger
	got := mergeSnapshots("svc", names, []registry.Snapshot{
		{Loaded: true, Revision: 7, Generation: 1, Instances: []*registry.Instance{muster}},
		{Loaded: true, Revision: 9, Generation: 2, Instances: []*registry.Instance{dup, other},
			StaleSince: stale, Err: errors.New("down")},
	}, &tags, nil)
	if len(got.Instances) != 2 || got.Instances[0].Version != "muster" || got.Instances[1].Addr != other.Addr {
		t.Fatalf("instances %v: want Muster's for the shared address, then the other, sorted by ID and address", got.Instances)
	}
	if SourceOf(got.Instances[0]) != PrimarySource || SourceOf(got.Instances[1]) != "go-zero" {
		t.Fatalf("sources %v: want muster, then go-zero", got.Instances)
	}
	if !got.Loaded || got.Revision != 9 || got.Generation != 3 || !got.StaleSince.Equal(stale) || got.Err == nil {
		t.Fatalf("state %+v", got)
	}

	waiting := mergeSnapshots("svc", names, []registry.Snapshot{{Loaded: true}, {}}, &tags, nil)
	if waiting.Loaded {
		t.Fatal("loaded while a part is still loading and not stale")
	}
	failed := mergeSnapshots("svc", names, []registry.Snapshot{{Loaded: true}, {StaleSince: stale, Err: errors.New("x")}}, &tags, nil)
	if !failed.Loaded || !failed.Stale() {
		t.Fatalf("a part that failed to load: want loaded and stale, got %+v", failed)
	}
	if none := mergeSnapshots("svc", names[:1], []registry.Snapshot{{StaleSince: stale}}, &tags, nil); none.Loaded {
		t.Fatal("loaded with no part loaded")
	}
}

// TestMergeSourceTags checks that every merged instance names its part in
// its metadata without changing the part's instance, replacing a value it
// was registered with, and that an unchanged instance keeps its pointer
// from one merge to the next while a changed one gets a new copy.
func TestMergeSourceTags(t *testing.T) {
	spoofed := &registry.Instance{Name: "svc", ID: "m", Addr: "10.0.0.1:1", Metadata: map[string]string{SourceKey: "kratos", "k": "v"}}
	kept := &registry.Instance{Name: "svc", ID: "k", Addr: "10.0.0.2:1"}
	names := []string{PrimarySource, "kratos"}
	var tags tagger
	merge := func(primary, source []*registry.Instance) []*registry.Instance {
		return mergeSnapshots("svc", names, []registry.Snapshot{
			{Loaded: true, Instances: primary}, {Loaded: true, Instances: source},
		}, &tags, nil).Instances
	}
	first := merge([]*registry.Instance{spoofed}, []*registry.Instance{kept})
	if SourceOf(first[0]) != "kratos" || SourceOf(first[1]) != PrimarySource || first[1].Metadata["k"] != "v" {
		t.Fatalf("first merge %v %v: want k from kratos, m from muster with its own metadata", *first[0], *first[1])
	}
	if spoofed.Metadata[SourceKey] != "kratos" || kept.Metadata != nil {
		t.Fatal("the parts' instances were changed")
	}
	changed := &registry.Instance{Name: "svc", ID: "m", Addr: "10.0.0.1:1", Version: "v2"}
	second := merge([]*registry.Instance{changed}, []*registry.Instance{kept})
	if second[0] != first[0] {
		t.Fatal("an unchanged instance got a new pointer")
	}
	if second[1] == first[1] || second[1].Version != "v2" || SourceOf(second[1]) != PrimarySource {
		t.Fatalf("a changed instance: got %+v, want a new copy of it from muster", *second[1])
	}
	// The same instance found in another part is tagged anew.
	third := merge(nil, []*registry.Instance{kept, changed})
	if SourceOf(third[1]) != "kratos" {
		t.Fatalf("an instance moved to kratos: got source %q", SourceOf(third[1]))
	}
	if len(tags.prev) != 2 {
		t.Fatalf("the memo holds %d copies, want the 2 of the last merge", len(tags.prev))
	}
}
