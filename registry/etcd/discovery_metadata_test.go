package etcd

import (
	"fmt"
	"reflect"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/musterhq/muster/registry"
)

// Instances of a service with equal metadata share one map, whether they
// were loaded or arrived in watch events; different metadata stays apart.
func TestCacheSharesEqualMetadata(t *testing.T) {
	c := newCache(registry.DefaultPrefix, cacheTestService, nil)
	meta := func(i int) map[string]string {
		if i%2 == 0 {
			return map[string]string{"color": "blue", "zone": "a"}
		}
		return map[string]string{"color": "green"}
	}
	var kvs []*mvccpb.KeyValue
	var evs []*mvccpb.Event
	for i := range 8 {
		in := registry.Instance{Name: cacheTestService, ID: fmt.Sprintf("i%d", i), Addr: fmt.Sprintf("10.0.0.%d:80", i+1), Metadata: meta(i)}
		ev := put(instanceKeyOf(in.ID), mustMarshal(t, in), int64(2+i))
		if i < 4 {
			kvs = append(kvs, ev.Kv)
		} else {
			evs = append(evs, ev)
		}
	}
	c.load(kvs)
	applyAll(c, evs...)
	list, _ := c.next()
	if len(list) != 8 {
		t.Fatalf("%d instances, want 8", len(list))
	}
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	for i, in := range list {
		if !reflect.DeepEqual(in.Metadata, meta(i)) {
			t.Fatalf("%s: metadata %v, want %v", in.ID, in.Metadata, meta(i))
		}
		if first := list[i%2]; !same(in.Metadata, first.Metadata) {
			t.Fatalf("%s does not share the metadata map of %s", in.ID, first.ID)
		}
	}
	if same(list[0].Metadata, list[1].Metadata) {
		t.Fatalf("different metadata share a map")
	}
}

func TestMetadataKeyIsUnambiguous(t *testing.T) {
	a := metadataKey(map[string]string{"a:b": "c"})
	b := metadataKey(map[string]string{"a": "b:c"})
	c := metadataKey(map[string]string{"1:a": "", "": "x"})
	if a == b || a == c || b == c {
		t.Fatalf("keys collide: %q %q %q", a, b, c)
	}
}
