package served

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/musterhq/muster/registry"
)

// MetaPrefix introduces a metadata filter in a target's query
// ("meta.<key>=<value>").
const MetaPrefix = "meta."

// Target is what a follower serves: a service, and the filters its
// instances must pass.
type Target struct {
	Service string
	// Version, when set, keeps the instances of that version.
	Version string
	// Region and Zone are the consumer's locality: with
	// Config.ZoneFallback off they keep the near instances only
	// (registry.Near); with it on they filter nothing.
	Region, Zone string
	// Metadata keeps the instances whose metadata has each key with its
	// value.
	Metadata map[string]string
}

// matches reports whether in passes the version and metadata filters.
func (q Target) matches(in *registry.Instance) bool {
	if q.Version != "" && in.Version != q.Version {
		return false
	}
	for k, v := range q.Metadata {
		if in.Metadata[k] != v {
			return false
		}
	}
	return true
}

// filter applies the version and metadata filters, then the locality
// (q.Region, q.Zone): with fallback on it keeps every instance, for the
// consumer to prefer the near ones; with fallback off it keeps the
// instances of the zone, or of the region when q names no zone
// (registry.Near), and none when there is none there.
func (q Target) filter(list []*registry.Instance, fallback bool) []*registry.Instance {
	hard := !fallback && (q.Zone != "" || q.Region != "")
	if q.Version == "" && len(q.Metadata) == 0 && !hard {
		return list // shared, read-only: nothing to filter
	}
	out := make([]*registry.Instance, 0, len(list))
	for _, in := range list {
		if q.matches(in) {
			out = append(out, in)
		}
	}
	if !hard {
		return out
	}
	want := registry.SameRegion
	if q.Zone != "" {
		want = registry.SameZone
	}
	near := out[:0:0]
	for _, in := range out {
		if registry.Near(q.Region, q.Zone, in.Region, in.Zone) <= want {
			near = append(near, in)
		}
	}
	return near
}

// describe writes the target's filters as a target's query does.
func (q Target) describe() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("version", q.Version)
	add("region", q.Region)
	add("zone", q.Zone)
	for _, k := range slices.Sorted(maps.Keys(q.Metadata)) {
		add(MetaPrefix+k, q.Metadata[k])
	}
	return strings.Join(parts, "&")
}

// locator is implemented by Discoveries that say where a service is looked
// up (registry/etcd's and registry/legacy's Locate).
type locator interface {
	Locate(service string) string
}

// emptyReason says why the list c has no instance, for the error
// consumers fail calls with: the service and target, where the service was
// looked up, and what the registry said. f.mu is held.
func (f *Follower) emptyReason(c *Chosen) string {
	var b strings.Builder
	fmt.Fprintf(&b, "no instance of service %q to call", f.t.Service)
	if l, ok := f.p.d.(locator); ok {
		if where := l.Locate(f.t.Service); where != "" {
			fmt.Fprintf(&b, " (looked up in %s)", where)
		}
	}
	snap := f.w.Snapshot()
	switch {
	case len(c.From) > 0:
		fmt.Fprintf(&b, ": the registry lists %d, none passes the target's filters (%s)", len(c.From), f.t.describe())
	case !f.state.live:
		b.WriteString(": the registry has not answered yet, and the disk snapshot lists none")
	case snap.Stale():
		fmt.Fprintf(&b, ": the registry has not answered for %v, and listed none when it last did",
			f.p.cfg.Clock.Now().Sub(snap.StaleSince).Round(time.Millisecond))
		if snap.Err != nil {
			fmt.Fprintf(&b, " (%v)", snap.Err)
		}
	default:
		fmt.Fprintf(&b, ": the registry answered (revision %d) and lists none", snap.Revision)
	}
	return b.String()
}
