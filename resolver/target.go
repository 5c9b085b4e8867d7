package resolver

import (
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/musterhq/muster/registry"
)

// query is a parsed muster target: the service and its filters.
type query struct {
	service  string
	version  string
	region   string
	zone     string
	metadata map[string]string
	lb       string // the balancer lb= names; "" for none (not part of key: it does not change the list)
}

// metaPrefix introduces a metadata filter in a target's query.
const metaPrefix = "meta."

// parseTarget reads
// "<scheme>:///<service>[?version=v&region=r&zone=z&meta.k=v&lb=b]".
// Every error names what is wrong.
func parseTarget(u url.URL) (query, error) {
	if u.Host != "" {
		return query{}, fmt.Errorf("%w: %q has authority %q; the service goes in the path: %s:///%s",
			ErrBadTarget, u.String(), u.Host, u.Scheme, u.Host)
	}
	service := strings.TrimPrefix(u.Path, "/")
	if service == "" {
		service = strings.TrimPrefix(u.Opaque, "/")
	}
	if service == "" {
		return query{}, fmt.Errorf("%w: %q names no service; want %s:///<service>", ErrBadTarget, u.String(), u.Scheme)
	}
	if err := registry.ValidateName(service); err != nil {
		return query{}, fmt.Errorf("%w: %q: %w", ErrBadTarget, u.String(), err)
	}
	values, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return query{}, fmt.Errorf("%w: %q: bad query: %v", ErrBadTarget, u.String(), err)
	}
	q := query{service: service}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		vs := values[k]
		if len(vs) != 1 || vs[0] == "" {
			return query{}, fmt.Errorf("%w: %q: query key %q needs exactly one non-empty value", ErrBadTarget, u.String(), k)
		}
		v := vs[0]
		switch {
		case k == "version":
			q.version = v
		case k == "zone":
			q.zone = v
		case k == "region":
			q.region = v
		case k == "lb":
			name, ok := targetBalancer(v)
			if !ok {
				return query{}, fmt.Errorf("%w: %q: lb=%s names no balancer; want p2c, wrr or the name of a balancer registered with gRPC (round_robin, pick_first, ...)",
					ErrBadTarget, u.String(), v)
			}
			q.lb = name
		case strings.HasPrefix(k, metaPrefix) && len(k) > len(metaPrefix):
			if q.metadata == nil {
				q.metadata = map[string]string{}
			}
			q.metadata[k[len(metaPrefix):]] = v
		default:
			return query{}, fmt.Errorf("%w: %q: unknown query key %q; known are version, region, zone, lb and meta.<key>", ErrBadTarget, u.String(), k)
		}
	}
	return q, nil
}

// matches reports whether in passes the version and metadata filters.
func (q query) matches(in *registry.Instance) bool {
	if q.version != "" && in.Version != q.version {
		return false
	}
	for k, v := range q.metadata {
		if in.Metadata[k] != v {
			return false
		}
	}
	return true
}

// filter applies the version and metadata filters, then the locality
// (q.region, q.zone): with fallback on it keeps every instance, for the
// balancer to prefer the near ones (see LocalityOf); with fallback off it
// keeps the instances of the zone, or of the region when q names no zone
// (registry.Near), and none when there is none there.
func (q query) filter(list []*registry.Instance, fallback bool) []*registry.Instance {
	hard := !fallback && (q.zone != "" || q.region != "")
	if q.version == "" && len(q.metadata) == 0 && !hard {
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
	if q.zone != "" {
		want = registry.SameZone
	}
	near := out[:0:0]
	for _, in := range out {
		if registry.Near(q.region, q.zone, in.Region, in.Zone) <= want {
			near = append(near, in)
		}
	}
	return near
}
