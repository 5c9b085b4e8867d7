package etcd

import (
	"slices"
	"strconv"
	"strings"
)

// metadataShareLimit bounds the distinct metadata maps a cache keeps to
// share: the instances of a service mostly carry a few distinct ones (a
// version, a zone, a color), and a service whose every instance differs
// gains nothing from more.
const metadataShareLimit = 4096

// metadataPool shares equal metadata maps among the instances of one
// service: half of an instance's heap is its metadata map, and most
// instances of a service carry the same few. It is owned by the cache's
// goroutine. Shared maps are never written: instances are immutable, and
// readers that change metadata (Normalize, Merged) copy it first.
type metadataPool struct {
	maps map[string]map[string]string // by metadataKey
}

// share returns a map equal to m: one already in the pool, or m itself
// (added to the pool while it has room).
func (p *metadataPool) share(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	key := metadataKey(m)
	if s, ok := p.maps[key]; ok {
		return s
	}
	if p.maps == nil {
		p.maps = make(map[string]map[string]string)
	}
	if len(p.maps) < metadataShareLimit {
		p.maps[key] = m
	}
	return m
}

// metadataKey encodes m unambiguously: its pairs sorted by key, each
// string prefixed by its length.
func metadataKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, s := range [2]string{k, m[k]} {
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteByte(':')
			b.WriteString(s)
		}
	}
	return b.String()
}
