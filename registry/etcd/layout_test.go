package etcd

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/musterhq/muster/registry"
)

// addrLayout is a layout for the cache's tests: keys "legacy/<service>/<suffix>"
// holding "host:port"; the ID is the suffix reversed (not the suffix, so a
// list patched by key would be out of order), "skip" is left out, and an
// empty value is bad.
type addrLayout struct{}

func (addrLayout) Prefix(service string) string { return "legacy/" + service + "/" }

func (addrLayout) Decode(service, suffix string, value []byte) (registry.Instance, error) {
	switch {
	case suffix == "skip":
		return registry.Instance{}, ErrNotInstance
	case len(value) == 0:
		return registry.Instance{}, errors.New("empty")
	}
	r := []byte(suffix)
	slices.Reverse(r)
	return registry.Instance{Name: service, ID: string(r), Addr: string(value)}, nil
}

func TestCacheWithLayout(t *testing.T) {
	c := newCache(registry.DefaultPrefix, cacheTestService, addrLayout{})
	key := func(s string) string { return "legacy/svc/" + s }
	c.load(nil)
	bad := applyAll(c,
		put(key("ab"), []byte("127.0.0.1:1"), 2), put(key("ba"), []byte("127.0.0.1:2"), 2),
		put(key("skip"), []byte("127.0.0.1:3"), 2), put(key("zz"), nil, 2),
		put(key("ca"), []byte("no port"), 2))
	if len(bad) != 2 {
		t.Fatalf("bad values %v, want the empty one and the one without a port", bad)
	}
	list, _ := c.next()
	if got := strings.Join(ids(list), ","); got != "ab,ba" {
		t.Fatalf("ids %s, want ab,ba (reversed suffixes, sorted)", got)
	}
	applyAll(c, del(key("ab"), 3), put(key("cc"), []byte("127.0.0.1:4"), 3))
	list, _ = c.next()
	if got := strings.Join(ids(list), ","); got != "ab,cc" {
		t.Fatalf("after a delete and a put: ids %s, want ab,cc", got)
	}
	fresh := newCache(registry.DefaultPrefix, cacheTestService, addrLayout{})
	fresh.load(nil)
	applyAll(fresh, put(key("ba"), []byte("127.0.0.1:2"), 2), put(key("cc"), []byte("127.0.0.1:4"), 3))
	want, _ := fresh.next()
	if !slices.EqualFunc(list, want, func(a, b *registry.Instance) bool { return a.Equal(*b) }) {
		t.Fatalf("patched list differs from a fresh one: %v vs %v", ids(list), ids(want))
	}
}
