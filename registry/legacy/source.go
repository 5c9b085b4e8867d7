package legacy

import (
	"maps"

	"github.com/musterhq/muster/registry"
)

// SourceKey is the metadata key in which a Merged Discovery names where
// each instance of its snapshots came from: PrimarySource for Muster's own
// registry, else the Name of the Source that listed it ("go-zero",
// "kratos", "etcd-naming" in the muster command). It is reserved: Merged
// sets it on every instance it serves, replacing any value an instance
// was registered with. Being metadata, it reaches everything that reads an
// instance (balancers, the resolver's meta.muster.source= filter, JSON
// output, the console) without a field of its own.
const SourceKey = "muster.source"

// PrimarySource is the SourceKey value of an instance found in Muster's
// own registry (the primary Discovery of NewMerged).
const PrimarySource = "muster"

// SourceOf returns where a Merged Discovery found in: the value of its
// SourceKey metadata, or "" for an instance that did not come through a
// Merged Discovery.
func SourceOf(in *registry.Instance) string {
	return in.Metadata[SourceKey]
}

// tagger returns the instances of merged snapshots with their source in
// their metadata. It memoizes one copy per instance pointer of the parts
// and keeps only the copies of the last merge, so an instance that did not
// change keeps its pointer from one merged snapshot to the next, as in the
// parts' own snapshots. It is pure and not safe for concurrent use.
type tagger struct {
	prev, next map[*registry.Instance]*registry.Instance
}

// tag returns in with SourceKey set to source: the copy made by the
// previous merge if in is the same instance, else a new copy (in itself is
// never changed; the parts share it).
func (t *tagger) tag(in *registry.Instance, source string) *registry.Instance {
	if c, ok := t.prev[in]; ok && c.Metadata[SourceKey] == source {
		t.keep(in, c)
		return c
	}
	c := *in
	c.Metadata = make(map[string]string, len(in.Metadata)+1)
	maps.Copy(c.Metadata, in.Metadata)
	c.Metadata[SourceKey] = source
	t.keep(in, &c)
	return &c
}

func (t *tagger) keep(in, c *registry.Instance) {
	if t.next == nil {
		t.next = map[*registry.Instance]*registry.Instance{}
	}
	t.next[in] = c
}

// done ends a merge: the copies it did not use are forgotten.
func (t *tagger) done() {
	t.prev, t.next = t.next, nil
}
