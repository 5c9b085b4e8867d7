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
	got := mergeSnapshots("svc", []registry.Snapshot{
		{Loaded: true, Revision: 7, Generation: 1, Instances: []*registry.Instance{muster}},
		{Loaded: true, Revision: 9, Generation: 2, Instances: []*registry.Instance{dup, other},
			StaleSince: stale, Err: errors.New("down")},
	})
	if len(got.Instances) != 2 || got.Instances[0] != muster || got.Instances[1] != other {
		t.Fatalf("instances %v: want Muster's for the shared address, then the other, sorted by ID and address", got.Instances)
	}
	if !got.Loaded || got.Revision != 9 || got.Generation != 3 || !got.StaleSince.Equal(stale) || got.Err == nil {
		t.Fatalf("state %+v", got)
	}

	waiting := mergeSnapshots("svc", []registry.Snapshot{{Loaded: true}, {}})
	if waiting.Loaded {
		t.Fatal("loaded while a part is still loading and not stale")
	}
	failed := mergeSnapshots("svc", []registry.Snapshot{{Loaded: true}, {StaleSince: stale, Err: errors.New("x")}})
	if !failed.Loaded || !failed.Stale() {
		t.Fatalf("a part that failed to load: want loaded and stale, got %+v", failed)
	}
	if none := mergeSnapshots("svc", []registry.Snapshot{{StaleSince: stale}}); none.Loaded {
		t.Fatal("loaded with no part loaded")
	}
}
