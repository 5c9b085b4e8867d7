package legacy

import (
	"errors"
	"slices"
	"strings"

	"github.com/musterhq/muster/registry"
)

// mergeSnapshots returns the snapshot of service made of parts, the first
// being Muster's own registry and the others legacy sources in order of
// preference; names[i] names part i. It is pure (t is the memo of the
// previous merges).
//
//   - Instances: the union by address; an address present in several
//     parts is served with the instance of the first (Muster's wins),
//     with the name of its part in its SourceKey metadata. Sorted by ID,
//     then address (IDs of different sources may collide). The instances
//     are t's copies of the parts' own, kept while the part's instance
//     is the same pointer, so an unchanged instance keeps its pointer
//     from one snapshot to the next.
//   - Loaded once every part is loaded, or at least one is and the others
//     are stale (their backend could not be read): a source that cannot
//     be read does not hold back the others.
//   - StaleSince: the earliest of the parts'; Err: their errors joined.
//   - Revision: the highest of the parts' (they normally share one etcd
//     store); Generation: the sum of theirs, so it changes whenever one
//     part's history changes.
//   - hidden: addresses left out of the legacy parts (settler).
func mergeSnapshots(service string, names []string, parts []registry.Snapshot, t *tagger, hidden map[string]bool) registry.Snapshot {
	out := registry.Snapshot{Service: service}
	loaded, waiting := 0, 0
	var errs []error
	n := 0
	for _, p := range parts {
		n += len(p.Instances)
		out.Revision = max(out.Revision, p.Revision)
		out.Generation += p.Generation
		switch {
		case p.Loaded:
			loaded++
		case !p.Stale():
			waiting++
		}
		if p.Stale() && (out.StaleSince.IsZero() || p.StaleSince.Before(out.StaleSince)) {
			out.StaleSince = p.StaleSince
		}
		if p.Err != nil {
			errs = append(errs, p.Err)
		}
	}
	out.Loaded = loaded > 0 && waiting == 0
	out.Err = errors.Join(errs...)
	seen := make(map[string]bool, n)
	list := make([]*registry.Instance, 0, n)
	for i, p := range parts {
		for _, in := range p.Instances {
			if i > 0 && hidden[in.Addr] {
				continue
			}
			if !seen[in.Addr] {
				seen[in.Addr] = true
				list = append(list, t.tag(in, names[i]))
			}
		}
	}
	t.done()
	slices.SortFunc(list, func(a, b *registry.Instance) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	out.Instances = list
	return out
}
