package resolver

import (
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/registry"
)

// query is a parsed muster target: what its channel is served (the
// service and its filters), and the balancer it names.
type query struct {
	served.Target
	lb string // the balancer lb= names; "" for none (it does not change the list)
}

// metaPrefix introduces a metadata filter in a target's query.
const metaPrefix = served.MetaPrefix

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
	q := query{Target: served.Target{Service: service}}
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
			q.Version = v
		case k == "zone":
			q.Zone = v
		case k == "region":
			q.Region = v
		case k == "lb":
			name, ok := targetBalancer(v)
			if !ok {
				return query{}, fmt.Errorf("%w: %q: lb=%s names no balancer; want p2c, wrr or the name of a balancer registered with gRPC (round_robin, pick_first, ...)",
					ErrBadTarget, u.String(), v)
			}
			q.lb = name
		case strings.HasPrefix(k, metaPrefix) && len(k) > len(metaPrefix):
			if q.Metadata == nil {
				q.Metadata = map[string]string{}
			}
			q.Metadata[k[len(metaPrefix):]] = v
		default:
			return query{}, fmt.Errorf("%w: %q: unknown query key %q; known are version, region, zone, lb and meta.<key>", ErrBadTarget, u.String(), k)
		}
	}
	return q, nil
}
