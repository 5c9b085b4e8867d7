package etcd

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/musterhq/muster/internal/retired"
	"github.com/musterhq/muster/registry"
)

// cache is what a Discovery knows of one service, by key: the registered
// values, the operators' overrides, the instances served (the two merged)
// and the sorted instance list last published. It applies a Get's result
// (load) and a watch response's events (apply), and produces the next list
// to publish (next).
//
// A cache is plain data: no goroutine, no clock, no etcd client. It is
// owned by the service's goroutine (discovery_service.go), which does the I/O, logs
// and counts the bad values the cache reports, and publishes the list under
// the service's lock. Applying any sequence of events gives the same list
// as loading the resulting key-value state afresh (FuzzCacheMatchesFreshLoad).
//
// Instances are never modified once stored: snapshots share them, and an
// unchanged instance keeps its pointer from one list to the next. An
// instance without an override is one copy, in raw and served.
type cache struct {
	prefix  string // the registry prefix (WithPrefix), to parse keys
	name    string // the service name
	service string // ServicePrefix(prefix, name), or the layout's prefix: every key read starts with it
	layout  Layout // nil: Muster's own layout

	raw       map[string]*registry.Instance // instances as registered
	overrides map[string]registry.Override  // operators' overrides
	served    map[string]*registry.Instance // raw with overrides applied: what is served
	bad       map[string]int64              // key (of either kind) -> mod revision of a skipped value
	metadata  metadataPool                  // equal metadata maps, shared among instances

	list    []*registry.Instance // the list next returned last; never modified
	all     bool                 // since then, any key may have changed
	touched []change             // since then, these keys changed (unless all)

	// retired are the IDs of the instances deleted while served Draining,
	// oldest first, at most registry.MaxRetired; an ID served again
	// leaves it. Published as Snapshot.Retired, so never modified: a
	// change makes a new slice. It is history, not state: a fresh load
	// of the same keys does not rebuild it.
	retired []string
}

// change is a key whose served instance changed, and that instance's ID
// (a function of the key alone, in every layout).
type change struct{ key, id string }

// badValue is a value a cache skipped: malformed, of an unknown schema
// version, not matching its key, or an invalid override. Each is reported
// once per value (mod revision) until forgetBad.
type badValue struct {
	key         string
	modRevision int64
	err         error
}

// newCache returns an empty cache of the service name under prefix, in
// Muster's layout when layout is nil, else in layout.
func newCache(prefix, name string, layout Layout) *cache {
	service := registry.ServicePrefix(prefix, name)
	if layout != nil {
		service = layout.Prefix(name)
	}
	return &cache{
		prefix:    prefix,
		name:      name,
		service:   service,
		layout:    layout,
		raw:       make(map[string]*registry.Instance),
		overrides: make(map[string]registry.Override),
		served:    make(map[string]*registry.Instance),
		bad:       make(map[string]int64),
		retired:   []string{},
	}
}

// load replaces the cache's content with the key-values of a Get of the
// whole service and returns the bad values not reported before. Instances
// equal to the ones served keep their pointers; if none changed, next
// reports no change.
func (c *cache) load(kvs []*mvccpb.KeyValue) []badValue {
	var bad []badValue
	raw := make(map[string]*registry.Instance, len(kvs))
	overrides := map[string]registry.Override{}
	seen := make(map[string]bool, len(c.bad))
	for _, kv := range kvs {
		key := string(kv.Key)
		seen[key] = true
		if target, ok := c.overrideKey(key); ok {
			var o registry.Override
			var ok bool
			if o, ok, bad = c.decodeOverride(kv, bad); ok {
				overrides[target] = o
			}
			continue
		}
		var in registry.Instance
		var ok bool
		if in, ok, bad = c.decode(kv, bad); ok {
			in.Metadata = c.metadata.share(in.Metadata)
			raw[key] = &in
		}
	}
	for key := range c.bad {
		if !seen[key] {
			delete(c.bad, key)
		}
	}
	served := make(map[string]*registry.Instance, len(raw))
	for key, in := range raw {
		served[key] = c.merged(key, in, overrides[key])
		if _, ok := overrides[key]; !ok {
			raw[key] = served[key]
		}
	}
	if !sameCache(c.served, served) {
		c.all = true
		for key, old := range c.served {
			if _, ok := served[key]; !ok {
				c.left(old)
			}
		}
		for _, in := range served {
			c.back(in.ID)
		}
	}
	c.raw, c.overrides, c.served = raw, overrides, served
	return bad
}

// apply applies one watch event to the cache, appending to bad the bad
// value it carries if not reported before, and returns bad.
func (c *cache) apply(ev *mvccpb.Event, bad []badValue) []badValue {
	key := string(ev.Kv.Key)
	deleted := ev.Type == mvccpb.DELETE
	if deleted {
		delete(c.bad, key)
	}
	if target, ok := c.overrideKey(key); ok {
		delete(c.overrides, target)
		if !deleted {
			var o registry.Override
			var ok bool
			if o, ok, bad = c.decodeOverride(ev.Kv, bad); ok {
				c.overrides[target] = o
			}
		}
		c.merge(target)
		return bad
	}
	delete(c.raw, key)
	if !deleted {
		var in registry.Instance
		var ok bool
		if in, ok, bad = c.decode(ev.Kv, bad); ok {
			in.Metadata = c.metadata.share(in.Metadata)
			delete(c.bad, key)
			c.raw[key] = &in
		}
	}
	c.merge(key)
	return bad
}

// overrideKey reports whether key holds an operator's override, and of
// which instance key. Only Muster's layout has overrides.
func (c *cache) overrideKey(key string) (target string, ok bool) {
	if c.layout != nil {
		return "", false
	}
	return registry.ParseOverrideKey(c.prefix, key)
}

// forgetBad forgets which bad values were reported, so that they are
// reported again when read: after a rewind of etcd's history, whose mod
// revisions may repeat those of the old one.
func (c *cache) forgetBad() { clear(c.bad) }

// merge recomputes the served instance of key from its registered value and
// its override, and records key as touched if it changed.
func (c *cache) merge(key string) {
	old, had := c.served[key]
	in, ok := c.raw[key]
	if !ok {
		delete(c.served, key)
		if had {
			c.touch(key, old.ID)
			c.left(old)
		}
		return
	}
	o, overridden := c.overrides[key]
	served := c.merged(key, in, o)
	if !overridden {
		c.raw[key] = served
	}
	c.served[key] = served
	if !had || served != old {
		c.touch(key, served.ID)
	}
	if !had {
		c.back(served.ID)
	}
}

// left records the departure of the served instance in: a deliberate one
// (retired) if it was Draining.
func (c *cache) left(in *registry.Instance) {
	if !in.Draining {
		return
	}
	c.retired = retired.Add(c.retired, in.ID)
}

// back removes id from the retired instances: it is served again.
func (c *cache) back(id string) { c.retired = retired.Remove(c.retired, id) }

func (c *cache) touch(key, id string) {
	if !c.all {
		c.touched = append(c.touched, change{key, id})
	}
}

// merged returns the instance to serve for key, registered as in, with the
// override o (zero: none): the served instance if it is equal, so that
// snapshots keep sharing it, else in itself, else a new one.
func (c *cache) merged(key string, in *registry.Instance, o registry.Override) *registry.Instance {
	old, had := c.served[key]
	if o.Weight == nil {
		if had && (old == in || old.Equal(*in)) {
			return old
		}
		return in
	}
	v := o.Apply(*in)
	if had && old.Equal(v) {
		return old
	}
	return &v
}

// decodeOverride decodes an override value, or appends it to bad if it is
// bad and not reported yet.
func (c *cache) decodeOverride(kv *mvccpb.KeyValue, bad []badValue) (registry.Override, bool, []badValue) {
	o, err := registry.UnmarshalOverride(kv.Value)
	if err != nil {
		return registry.Override{}, false, c.skip(kv, err, bad)
	}
	delete(c.bad, string(kv.Key))
	return o, true, bad
}

// decode turns a key-value into an instance, or appends it to bad if it is
// bad and not reported yet.
func (c *cache) decode(kv *mvccpb.KeyValue, bad []badValue) (registry.Instance, bool, []badValue) {
	if c.layout != nil {
		return c.decodeLayout(kv, bad)
	}
	key := string(kv.Key)
	in, err := registry.Unmarshal(kv.Value)
	if err == nil {
		var name, id string
		name, id, err = registry.ParseKey(c.prefix, key)
		if err == nil && (in.Name != name || in.ID != id) {
			err = fmt.Errorf("value names %s/%s but the key is %s/%s", in.Name, in.ID, name, id)
		}
	}
	if err == nil {
		return in, true, bad
	}
	return registry.Instance{}, false, c.skip(kv, err, bad)
}

// skip records a bad value and appends it to bad, once per value (mod
// revision).
func (c *cache) skip(kv *mvccpb.KeyValue, err error, bad []badValue) []badValue {
	key := string(kv.Key)
	if c.bad[key] != kv.ModRevision {
		c.bad[key] = kv.ModRevision
		bad = append(bad, badValue{key: key, modRevision: kv.ModRevision, err: err})
	}
	return bad
}

// next returns the sorted list of the instances served, and whether it
// changed (some served instance did) since the last call; unchanged, it is
// the same slice. After changed keys it is a patched copy of the previous
// list (O(n + k log k) for k changed keys, instead of O(n log n)), after a
// load a full rebuild. A returned list is never modified: watchers may hold
// it.
func (c *cache) next() ([]*registry.Instance, bool) {
	switch {
	case c.all:
		c.list = sortedInstances(c.served)
	case len(c.touched) > 0:
		c.list = c.patched(c.list, c.touched)
	default:
		return c.list, false
	}
	c.all, c.touched = false, c.touched[:0]
	return c.list, true
}

// patched returns a copy of prev with the keys in changes updated from the
// cache, in one merge pass: the changes sorted by ID, the runs of prev
// between them copied whole. A mass expiry's thousands of deletes batched
// into one list cost one copy of it, not one shift of its tail each.
func (c *cache) patched(prev []*registry.Instance, changes []change) []*registry.Instance {
	slices.SortFunc(changes, func(a, b change) int {
		return cmp.Or(strings.Compare(a.id, b.id), strings.Compare(a.key, b.key))
	})
	changes = slices.Compact(changes) // a key touched twice is read once
	next := make([]*registry.Instance, 0, len(prev)+len(changes))
	i := 0
	for _, t := range changes {
		j, found := slices.BinarySearchFunc(prev[i:], t.id, func(in *registry.Instance, id string) int {
			return strings.Compare(in.ID, id)
		})
		next = append(next, prev[i:i+j]...)
		i += j
		if found {
			i++ // replaced or removed
		}
		if in, present := c.served[t.key]; present {
			next = append(next, in)
		}
	}
	return append(next, prev[i:]...)
}

func sortedInstances(served map[string]*registry.Instance) []*registry.Instance {
	out := make([]*registry.Instance, 0, len(served))
	for _, in := range served {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b *registry.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// sameCache reports whether two sets of served instances are the same.
// Unchanged instances are shared between them, so pointers are compared
// first.
func sameCache(a, b map[string]*registry.Instance) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || (v != w && !v.Equal(*w)) {
			return false
		}
	}
	return true
}
