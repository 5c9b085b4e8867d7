package retired

import (
	"fmt"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/musterhq/muster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAddAndRemove(t *testing.T) {
	var list []string
	for i := range registry.MaxRetired + 2 {
		prev := slices.Clone(list)
		next := Add(list, fmt.Sprint(i))
		if !slices.Equal(list, prev) {
			t.Fatalf("Add modified its list: %v, was %v", list, prev)
		}
		list = next
	}
	if len(list) != registry.MaxRetired || list[0] != "2" || list[len(list)-1] != fmt.Sprint(registry.MaxRetired+1) {
		t.Fatalf("after %d adds: %d entries, %s..%s; want the newest %d, oldest first", registry.MaxRetired+2, len(list), list[0], list[len(list)-1], registry.MaxRetired)
	}
	prev := slices.Clone(list)
	moved := Add(list, "2")
	if !slices.Equal(list, prev) || moved[len(moved)-1] != "2" || len(moved) != registry.MaxRetired || slices.Index(moved, "2") != len(moved)-1 {
		t.Fatalf("Add of a listed ID: %v (list now %v); want it moved to the end, once, the list unchanged", moved, list)
	}
	gone := Remove(moved, "10")
	if slices.Contains(gone, "10") || len(gone) != len(moved)-1 || !slices.Contains(moved, "10") {
		t.Fatalf("Remove: %v from %v", gone, moved)
	}
	if same := Remove(gone, "nope"); &same[0] != &gone[0] {
		t.Fatal("Remove of an unlisted ID made a new list")
	}
}
