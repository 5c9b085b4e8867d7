package resolver

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// locator is implemented by Discoveries that say where a service is looked
// up (registry/etcd's and registry/legacy's Locate).
type locator interface {
	Locate(service string) string
}

// emptyReason says why the state r hands has no endpoint, for the error
// Muster's balancers fail calls with: the service and target, where the
// service was looked up, and what the registry said. Called with r.mu held.
func (r *musterResolver) emptyReason(st *builtState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "no instance of service %q to call", r.q.service)
	if where := r.where(); where != "" {
		fmt.Fprintf(&b, " (looked up in %s)", where)
	}
	snap := r.w.Snapshot()
	switch {
	case len(st.from) > 0:
		fmt.Fprintf(&b, ": the registry lists %d, none passes the target's filters (%s)", len(st.from), r.q.describe())
	case !r.live:
		b.WriteString(": the registry has not answered yet, and the disk snapshot lists none")
	case snap.Stale():
		fmt.Fprintf(&b, ": the registry has not answered for %v, and listed none when it last did", r.b.opts.clock.now().Sub(snap.StaleSince).Round(time.Millisecond))
		if snap.Err != nil {
			fmt.Fprintf(&b, " (%v)", snap.Err)
		}
	default:
		fmt.Fprintf(&b, ": the registry answered (revision %d) and lists none", snap.Revision)
	}
	return b.String()
}

// where says where the Builder's Discovery looks up r's service; "" when
// it cannot say.
func (r *musterResolver) where() string {
	if l, ok := r.b.d.(locator); ok {
		return l.Locate(r.q.service)
	}
	return ""
}

// describe writes the target's filters as its query does.
func (q query) describe() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("version", q.version)
	add("region", q.region)
	add("zone", q.zone)
	for _, k := range slices.Sorted(maps.Keys(q.metadata)) {
		add(metaPrefix+k, q.metadata[k])
	}
	return strings.Join(parts, "&")
}
