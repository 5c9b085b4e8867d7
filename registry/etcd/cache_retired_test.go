package etcd

import (
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/musterhq/muster/registry"
)

// The cache records an instance deleted while served Draining (its own
// value, or an operator's override of weight 0) as retired; one deleted
// while serving is not; an instance served again leaves the record; the
// record keeps the newest registry.MaxRetired; a load that finds a
// draining instance gone records it as a deletion would.
func TestCacheRecordsDeliberateDepartures(t *testing.T) {
	c := newCache(registry.DefaultPrefix, cacheTestService, nil)
	serving := func(id string) []byte {
		return mustMarshal(t, registry.Instance{Name: cacheTestService, ID: id, Addr: "10.0.0.1:1"})
	}
	draining := func(id string) []byte {
		return mustMarshal(t, registry.Instance{Name: cacheTestService, ID: id, Addr: "10.0.0.1:1", Draining: true})
	}
	if c.retired == nil {
		t.Fatal("a new cache's record is nil, want empty: the backend records departures")
	}
	applyAll(c, put(instanceKeyOf("a"), serving("a"), 2), put(instanceKeyOf("b"), serving("b"), 3),
		put(instanceKeyOf("c"), serving("c"), 4))
	applyAll(c, del(instanceKeyOf("a"), 5))
	if len(c.retired) != 0 {
		t.Fatalf("retired %v after a serving instance's deletion, want none", c.retired)
	}
	published := c.retired
	applyAll(c, put(instanceKeyOf("b"), draining("b"), 6), del(instanceKeyOf("b"), 7))
	applyAll(c, put(overrideKeyOf("c"), mustMarshalOverride(t, 0), 8), del(instanceKeyOf("c"), 9))
	if !slices.Equal(c.retired, []string{"b", "c"}) {
		t.Fatalf("retired %v, want b (drained by itself) and c (by an override)", c.retired)
	}
	if len(published) != 0 {
		t.Fatalf("a published record was modified: %v", published)
	}
	applyAll(c, put(instanceKeyOf("b"), serving("b"), 10))
	if !slices.Equal(c.retired, []string{"c"}) {
		t.Fatalf("retired %v with b registered again, want c only", c.retired)
	}

	for i := range registry.MaxRetired + 5 {
		id := fmt.Sprintf("x%03d", i)
		applyAll(c, put(instanceKeyOf(id), draining(id), int64(20+2*i)), del(instanceKeyOf(id), int64(21+2*i)))
	}
	if len(c.retired) != registry.MaxRetired || c.retired[0] != "x005" || c.retired[len(c.retired)-1] != fmt.Sprintf("x%03d", registry.MaxRetired+4) {
		t.Fatalf("retired holds %d from %s to %s, want the newest %d", len(c.retired), c.retired[0], c.retired[len(c.retired)-1], registry.MaxRetired)
	}

	d := newCache(registry.DefaultPrefix, cacheTestService, nil)
	d.load([]*mvccpb.KeyValue{
		{Key: []byte(instanceKeyOf("a")), Value: draining("a"), ModRevision: 2},
		{Key: []byte(instanceKeyOf("b")), Value: serving("b"), ModRevision: 3},
	})
	d.load(nil)
	if !slices.Equal(d.retired, []string{"a"}) {
		t.Fatalf("retired %v after a load found both gone, want a (draining) only", d.retired)
	}
}
