package zookeeper

import (
	"fmt"
	"slices"
	"testing"

	"github.com/musterhq/muster/registry"
)

// A deleted node is retired when it was served Draining, or when a change
// of its value was notified and the node was gone when read (the Draining
// write of a Deregister the Discovery could not read in time); a node
// deleted while serving is not; a node back leaves the record, which keeps
// the newest registry.MaxRetired.
func TestCacheRetired(t *testing.T) {
	c := newCache("svc")
	put := func(id string, draining bool) {
		t.Helper()
		val, err := registry.Marshal(registry.Instance{Name: "svc", ID: id, Addr: "127.0.0.1:1", Draining: draining})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.put(id, val, 1); err != nil {
			t.Fatal(err)
		}
	}
	put("drained", false)
	put("changed", false)
	put("serving", false)
	c.build()
	put("drained", true)
	c.build()
	if c.retired == nil || len(c.retired) != 0 {
		t.Fatalf("retired = %#v before any deletion, want empty and not nil", c.retired)
	}
	c.keep([]string{"changed", "serving"}, nil)
	c.remove("changed", true)
	c.keep(nil, map[string]bool{"other": true})
	if !slices.Equal(c.retired, []string{"drained", "changed"}) {
		t.Fatalf("retired = %v, want [drained changed] (serving left serving, with no change)", c.retired)
	}
	c.build()
	put("drained", false)
	if !slices.Equal(c.retired, []string{"changed"}) {
		t.Fatalf("retired = %v with drained back, want [changed]", c.retired)
	}
	for i := range registry.MaxRetired + 5 {
		id := fmt.Sprintf("x%03d", i)
		put(id, false)
		c.remove(id, true)
	}
	if len(c.retired) != registry.MaxRetired || c.retired[0] != "x005" || c.retired[len(c.retired)-1] != fmt.Sprintf("x%03d", registry.MaxRetired+4) {
		t.Fatalf("retired holds %d from %s to %s, want the newest %d", len(c.retired), c.retired[0], c.retired[len(c.retired)-1], registry.MaxRetired)
	}
}
