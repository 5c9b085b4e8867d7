package etcd

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/musterhq/muster/registry"
)

// The cache's tests run without etcd: events and key-values are built by
// hand, as a watch response or a Get would carry them.

const cacheTestService = "svc"

func instanceKeyOf(id string) string {
	return registry.Key(registry.DefaultPrefix, cacheTestService, id)
}

func overrideKeyOf(id string) string {
	return registry.OverrideKey(registry.DefaultPrefix, cacheTestService, id)
}

func mustMarshal(tb testing.TB, in registry.Instance) []byte {
	tb.Helper()
	v, err := registry.Marshal(in)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func mustMarshalOverride(tb testing.TB, weight int) []byte {
	tb.Helper()
	v, err := registry.MarshalOverride(registry.Override{Weight: &weight})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func put(key string, val []byte, rev int64) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: val, ModRevision: rev}}
}

func del(key string, rev int64) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}
}

// applyAll applies one watch response's events and returns the bad values
// reported.
func applyAll(c *cache, evs ...*mvccpb.Event) []badValue {
	var bad []badValue
	for _, ev := range evs {
		bad = c.apply(ev, bad)
	}
	return bad
}

func ids(list []*registry.Instance) []string {
	out := make([]string, len(list))
	for i, in := range list {
		out[i] = in.ID
	}
	return out
}

func TestCacheAppliesPutsAndDeletesInOrder(t *testing.T) {
	c := newCache(registry.DefaultPrefix, cacheTestService, nil)
	if list, changed := c.next(); changed || len(list) != 0 {
		t.Fatalf("empty cache: %v, changed %v", ids(list), changed)
	}
	a := registry.Instance{Name: cacheTestService, ID: "a", Addr: "10.0.0.1:80"}
	b := registry.Instance{Name: cacheTestService, ID: "b", Addr: "10.0.0.2:80"}
	cc := registry.Instance{Name: cacheTestService, ID: "c", Addr: "10.0.0.3:80"}
	applyAll(c, put(instanceKeyOf("c"), mustMarshal(t, cc), 2), put(instanceKeyOf("a"), mustMarshal(t, a), 2))
	first, changed := c.next()
	if !changed || !slices.Equal(ids(first), []string{"a", "c"}) {
		t.Fatalf("after two puts: %v, changed %v", ids(first), changed)
	}
	applyAll(c, put(instanceKeyOf("b"), mustMarshal(t, b), 3))
	second, changed := c.next()
	if !changed || !slices.Equal(ids(second), []string{"a", "b", "c"}) {
		t.Fatalf("after a third put: %v, changed %v", ids(second), changed)
	}
	if second[0] != first[0] || second[2] != first[1] {
		t.Fatal("instances the put did not touch changed pointer")
	}
	if !slices.Equal(ids(first), []string{"a", "c"}) {
		t.Fatalf("the previous list was modified: %v", ids(first))
	}
	// The same value again (a re-put by a registrar): no change.
	applyAll(c, put(instanceKeyOf("b"), mustMarshal(t, b), 4))
	if third, changed := c.next(); changed || &third[0] != &second[0] {
		t.Fatalf("an equal value published a new list (changed %v)", changed)
	}
	applyAll(c, del(instanceKeyOf("a"), 5), del(instanceKeyOf("zz"), 5))
	if list, changed := c.next(); !changed || !slices.Equal(ids(list), []string{"b", "c"}) || list[0] != second[1] {
		t.Fatalf("after a delete: %v, changed %v", ids(list), changed)
	}
}

func TestCacheMergesOverrides(t *testing.T) {
	c := newCache(registry.DefaultPrefix, cacheTestService, nil)
	a := registry.Instance{Name: cacheTestService, ID: "a", Addr: "10.0.0.1:80", Weight: 30}
	// An override that arrives before its instance waits for it.
	applyAll(c, put(overrideKeyOf("a"), mustMarshalOverride(t, 0), 2))
	if list, _ := c.next(); len(list) != 0 {
		t.Fatalf("an override without its instance is served: %v", ids(list))
	}
	applyAll(c, put(instanceKeyOf("a"), mustMarshal(t, a), 3))
	list, _ := c.next()
	if len(list) != 1 || !list[0].Draining || list[0].EffectiveWeight() != 0 {
		t.Fatalf("drained instance served as %+v", list)
	}
	if raw := c.raw[instanceKeyOf("a")]; raw.Draining || raw.Weight != 30 {
		t.Fatalf("the registered value was modified: %+v", raw)
	}
	applyAll(c, put(overrideKeyOf("a"), mustMarshalOverride(t, 5), 4))
	list, _ = c.next()
	if list[0].Draining || list[0].Weight != 5 {
		t.Fatalf("reweighted instance served as %+v", list[0])
	}
	// A bad override is skipped: the instance is served as registered.
	bad := applyAll(c, put(overrideKeyOf("a"), []byte(`{"v":1,"weight":-1}`), 5))
	if len(bad) != 1 || bad[0].key != overrideKeyOf("a") || bad[0].modRevision != 5 {
		t.Fatalf("bad override reported as %+v", bad)
	}
	list, _ = c.next()
	if list[0].Weight != 30 || list[0] != c.raw[instanceKeyOf("a")] {
		t.Fatalf("instance under a bad override served as %+v, not the registered copy", list[0])
	}
	applyAll(c, put(overrideKeyOf("a"), mustMarshalOverride(t, 0), 6), del(overrideKeyOf("a"), 7))
	list, _ = c.next()
	if list[0].Draining || list[0].Weight != 30 {
		t.Fatalf("instance after its override was deleted served as %+v", list[0])
	}
}

func TestCacheReportsBadValuesOncePerModRevision(t *testing.T) {
	c := newCache(registry.DefaultPrefix, cacheTestService, nil)
	a := registry.Instance{Name: cacheTestService, ID: "a", Addr: "10.0.0.1:80"}
	other := registry.Instance{Name: cacheTestService, ID: "other", Addr: "10.0.0.9:80"}
	kvs := []*mvccpb.KeyValue{
		{Key: []byte(instanceKeyOf("a")), Value: mustMarshal(t, a), ModRevision: 2},
		{Key: []byte(instanceKeyOf("b")), Value: []byte("not json"), ModRevision: 3},
		{Key: []byte(instanceKeyOf("c")), Value: mustMarshal(t, other), ModRevision: 4}, // names another ID
		{Key: []byte(instanceKeyOf("d")), Value: []byte(`{"v":99}`), ModRevision: 5},
	}
	bad := c.load(kvs)
	if got := badKeys(bad); !slices.Equal(got, []string{instanceKeyOf("b"), instanceKeyOf("c"), instanceKeyOf("d")}) {
		t.Fatalf("first load reported %v", got)
	}
	if list, _ := c.next(); !slices.Equal(ids(list), []string{"a"}) {
		t.Fatalf("served %v", ids(list))
	}
	// Read again, the same values are not reported again.
	if bad := c.load(kvs); len(bad) != 0 {
		t.Fatalf("second load reported %v", badKeys(bad))
	}
	if _, changed := c.next(); changed {
		t.Fatal("a load of the same values published a change")
	}
	// A new bad value of the same key is.
	if bad := applyAll(c, put(instanceKeyOf("b"), []byte("still not json"), 6)); len(bad) != 1 || bad[0].modRevision != 6 {
		t.Fatalf("new bad value reported as %+v", bad)
	}
	// A deleted key is forgotten: written bad again, even at a mod
	// revision seen before (etcd never does that within a history), it is
	// reported again.
	applyAll(c, del(instanceKeyOf("b"), 7))
	if bad := applyAll(c, put(instanceKeyOf("b"), []byte("x"), 6)); len(bad) != 1 {
		t.Fatalf("bad value after a delete reported as %+v", bad)
	}
	// A key that left while not watched is forgotten by the next load.
	c.load(kvs[:1])
	if _, ok := c.bad[instanceKeyOf("c")]; ok {
		t.Fatal("a key absent from the load is still recorded as bad")
	}
	// After a rewind every bad value is reported again.
	c.forgetBad()
	if bad := c.load(kvs); len(bad) != 3 {
		t.Fatalf("load after forgetBad reported %v", badKeys(bad))
	}
}

func badKeys(bad []badValue) []string {
	out := make([]string, len(bad))
	for i, b := range bad {
		out[i] = b.key
	}
	slices.Sort(out)
	return out
}

func TestCachePatchesBatchesOfKeys(t *testing.T) {
	const batch = 16
	c := newCache(registry.DefaultPrefix, cacheTestService, nil)
	var evs []*mvccpb.Event
	for i := range 3 * batch {
		in := registry.Instance{Name: cacheTestService, ID: fmt.Sprintf("i%03d", i), Addr: fmt.Sprintf("10.0.0.%d:80", i)}
		evs = append(evs, put(instanceKeyOf(in.ID), mustMarshal(t, in), int64(2+i)))
	}
	// Many keys in one response, then one response per key: patches.
	applyAll(c, evs[:2*batch]...)
	prev, _ := c.next()
	for _, ev := range evs[2*batch:] {
		applyAll(c, ev)
		list, changed := c.next()
		if !changed || len(list) != len(prev)+1 {
			t.Fatalf("%s: %d instances after %d, changed %v", ev.Kv.Key, len(list), len(prev), changed)
		}
		prev = list
	}
	if !slices.IsSortedFunc(prev, func(a, b *registry.Instance) int { return compareIDs(a, b) }) {
		t.Fatalf("not sorted: %v", ids(prev))
	}
}

func compareIDs(a, b *registry.Instance) int {
	switch {
	case a.ID < b.ID:
		return -1
	case a.ID > b.ID:
		return 1
	}
	return 0
}

// fuzzKeyIDs are the instance IDs of the fuzz test's key space: few, so
// that events meet the same keys often.
var fuzzKeyIDs = [...]string{"a", "b", "c", "d", "e"}

// fuzzValues are the values an instance key is written with: valid ones
// (some equal to each other but for the ID, others differing in weight,
// draining or zone) and bad ones.
func fuzzValues(tb testing.TB, id string) [][]byte {
	base := registry.Instance{Name: cacheTestService, ID: id, Addr: "10.0.0.1:80"}
	zoned := base
	zoned.Zone = "eu-1a"
	heavy := base
	heavy.Weight = 300
	drained := base
	drained.Draining = true
	other := base
	other.ID = id + "x" // valid JSON naming another ID: bad
	return [][]byte{
		mustMarshal(tb, base), mustMarshal(tb, zoned), mustMarshal(tb, heavy), mustMarshal(tb, drained),
		mustMarshal(tb, other), []byte("not json"), []byte(`{"v":2,"name":"svc"}`),
	}
}

// fuzzOverrides are the values an override key is written with: weights
// 0 (drain), 100 (the default: no change to most values), 300 and invalid
// ones.
func fuzzOverrides(tb testing.TB) [][]byte {
	return [][]byte{
		mustMarshalOverride(tb, 0), mustMarshalOverride(tb, 100), mustMarshalOverride(tb, 300),
		[]byte(`{"v":1,"weight":-1}`), []byte("{"),
	}
}

// FuzzCacheMatchesFreshLoad decodes its input into a sequence of watch
// responses over a small key space (instance puts with valid and bad values,
// deletes, override puts and deletes, a key that is no instance key, with
// increasing revisions) and applies them to a cache loaded empty. After
// every response it checks the published list against a cache loaded
// afresh with the same key-value state (same instances, merged weight and
// draining, order), that an instance the response did not touch kept its
// pointer, that each bad value was reported exactly once, and that only
// values in the store are recorded as bad. Some inputs
// reload the incremental cache (a resync), which must change nothing, or
// forget the bad values first (a rewind), which must report every bad
// value again.
func FuzzCacheMatchesFreshLoad(f *testing.F) {
	f.Add([]byte{0x00, 0x10, 0x80, 0x20, 0x05})
	f.Add([]byte{0x00, 0x13, 0x01, 0x03, 0x81, 0x00, 0x02, 0x84})
	f.Add([]byte{0x00, 0x01, 0x02, 0x03, 0x04, 0x10, 0x11, 0x12, 0x13, 0x14, 0x20, 0x21, 0x22, 0x23, 0x24, 0x30, 0x31, 0x32, 0x33, 0x34, 0x40, 0x41, 0x80, 0x06, 0x87})
	f.Add([]byte{0x0c, 0x2b, 0x80, 0x05, 0x07, 0x83, 0x06})

	values := map[string][][]byte{}
	var keys []string // instance keys, then the key that is none
	for _, id := range fuzzKeyIDs {
		keys = append(keys, instanceKeyOf(id))
		values[instanceKeyOf(id)] = fuzzValues(f, id)
	}
	// Under the service's prefix, but not <prefix>/<service>/<id>: always
	// bad, and not an override key either.
	junk := instanceKeyOf("a") + "/x"
	keys = append(keys, junk)
	values[junk] = [][]byte{mustMarshal(f, registry.Instance{Name: cacheTestService, ID: "a", Addr: "10.0.0.1:80"})}
	overrides := fuzzOverrides(f)

	f.Fuzz(func(t *testing.T, data []byte) {
		c := newCache(registry.DefaultPrefix, cacheTestService, nil)
		c.load(nil)
		list, _ := c.next()
		state := map[string]*mvccpb.KeyValue{} // the store
		rev := int64(1)
		reported := map[string]int64{} // key -> mod revision last reported bad
		var evs []*mvccpb.Event
		touchedBy := map[string]int{} // instance key -> events of this response on it or its override

		// Every byte is one operation: the high bit ends the watch
		// response after it; bits 4-6 choose the operation, bits 0-3
		// the key and the value.
		for step, b := range data {
			op, arg := (b>>4)&7, int(b&15)
			key := keys[arg%len(keys)]
			rev++
			switch op {
			case 0, 1, 2: // put an instance key
				vals := values[key]
				ev := put(key, vals[(arg+int(op)*3)%len(vals)], rev)
				evs, state[key] = append(evs, ev), ev.Kv
				touchedBy[key]++
			case 3: // delete an instance key
				evs = append(evs, del(key, rev))
				delete(state, key)
				touchedBy[key]++
			case 4, 5: // put an override
				id := fuzzKeyIDs[arg%len(fuzzKeyIDs)]
				ev := put(overrideKeyOf(id), overrides[(arg+int(op))%len(overrides)], rev)
				evs, state[overrideKeyOf(id)] = append(evs, ev), ev.Kv
				touchedBy[instanceKeyOf(id)]++
			case 6: // delete an override
				id := fuzzKeyIDs[arg%len(fuzzKeyIDs)]
				evs = append(evs, del(overrideKeyOf(id), rev))
				delete(state, overrideKeyOf(id))
				touchedBy[instanceKeyOf(id)]++
			case 7: // a reload (a resync), after forgetting bad values (a rewind) if arg is odd
				if len(evs) > 0 {
					break // only between responses
				}
				forget := arg%2 == 1
				if forget {
					c.forgetBad()
					clear(reported)
				}
				bad := c.load(kvsOf(state))
				checkReported(t, step, bad, reported)
				if forget {
					if want := badIn(c, state); !slices.Equal(badKeys(bad), want) {
						t.Fatalf("step %d: reload after forgetBad reported %v, want %v", step, badKeys(bad), want)
					}
				}
				next, changed := c.next()
				if changed || (len(next) > 0 && &next[0] != &list[0]) {
					t.Fatalf("step %d: a reload of the state the cache holds published a change", step)
				}
				compareWithFreshLoad(t, step, next, state)
				continue
			}
			if len(evs) == 0 || (b&0x80 == 0 && step < len(data)-1) {
				continue
			}
			// One watch response.
			bad := applyAll(c, evs...)
			checkReported(t, step, bad, reported)
			for _, ev := range evs {
				if ev.Type == mvccpb.PUT && reported[string(ev.Kv.Key)] != ev.Kv.ModRevision && isBad(c, string(ev.Kv.Key), ev.Kv.ModRevision) {
					t.Fatalf("step %d: bad value of %s at %d not reported", step, ev.Kv.Key, ev.Kv.ModRevision)
				}
			}
			for key, r := range c.bad {
				if kv, ok := state[key]; !ok || kv.ModRevision != r {
					t.Fatalf("step %d: %s recorded as bad at %d, the store has %v", step, key, r, kv)
				}
			}
			next, _ := c.next()
			compareWithFreshLoad(t, step, next, state)
			checkPointers(t, step, list, next, touchedBy)
			list, evs = next, evs[:0]
			clear(touchedBy)
		}
	})
}

// kvsOf returns the key-values of state as a Get returns them: sorted by key.
func kvsOf(state map[string]*mvccpb.KeyValue) []*mvccpb.KeyValue {
	kvs := make([]*mvccpb.KeyValue, 0, len(state))
	for _, key := range slices.Sorted(maps.Keys(state)) {
		kvs = append(kvs, state[key])
	}
	return kvs
}

// badIn returns the keys of state that a fresh load reports as bad, sorted.
func badIn(c *cache, state map[string]*mvccpb.KeyValue) []string {
	fresh := newCache(c.prefix, cacheTestService, nil)
	return badKeys(fresh.load(kvsOf(state)))
}

// isBad reports whether the cache holds key's value at modRev as bad and
// it is still that value (a later event of the response may have replaced
// it).
func isBad(c *cache, key string, modRev int64) bool {
	r, ok := c.bad[key]
	return ok && r == modRev
}

// checkReported checks that no bad value is reported twice and records
// the reported ones.
func checkReported(t *testing.T, step int, bad []badValue, reported map[string]int64) {
	t.Helper()
	for _, b := range bad {
		if reported[b.key] == b.modRevision {
			t.Fatalf("step %d: bad value of %s at %d reported twice", step, b.key, b.modRevision)
		}
		if b.err == nil {
			t.Fatalf("step %d: bad value of %s reported without a reason", step, b.key)
		}
		reported[b.key] = b.modRevision
	}
}

// compareWithFreshLoad checks list against the list of a cache loaded
// afresh with state: same instances (merged weight and draining included),
// same order.
func compareWithFreshLoad(t *testing.T, step int, list []*registry.Instance, state map[string]*mvccpb.KeyValue) {
	t.Helper()
	fresh := newCache(registry.DefaultPrefix, cacheTestService, nil)
	fresh.load(kvsOf(state))
	want, _ := fresh.next()
	if len(list) != len(want) {
		t.Fatalf("step %d: %v, a fresh load gives %v", step, ids(list), ids(want))
	}
	for i := range want {
		if !list[i].Equal(*want[i]) {
			t.Fatalf("step %d: instance %d is %+v, a fresh load gives %+v", step, i, *list[i], *want[i])
		}
	}
}

// checkPointers checks that an instance in both lists kept its pointer if
// the response did not touch its key, or touched it once and left it equal
// (a re-put of the same value, an override that changes nothing).
func checkPointers(t *testing.T, step int, prev, next []*registry.Instance, touchedBy map[string]int) {
	t.Helper()
	byID := make(map[string]*registry.Instance, len(prev))
	for _, in := range prev {
		byID[in.ID] = in
	}
	for _, in := range next {
		old, ok := byID[in.ID]
		if !ok || old == in {
			continue
		}
		n := touchedBy[instanceKeyOf(in.ID)]
		if n == 0 {
			t.Fatalf("step %d: %s changed pointer in a response that did not touch it", step, in.ID)
		}
		if n == 1 && old.Equal(*in) {
			t.Fatalf("step %d: %s changed pointer but not value", step, in.ID)
		}
	}
}
