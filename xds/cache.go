package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/internal/xdscheck"
	"github.com/musterhq/muster/registry"
)

// caches is the cache the ADS server reads: one LinearCache per resource
// type, so that every resource has its own version and a change of one
// service sends that service's resources only, and for endpoints one
// LinearCache per client locality (region and zone), since priorities
// depend on it (see docs/XDS.md, "Per-locality endpoints").
//
// It also keeps the server from resending a version a client rejected:
// go-control-plane answers a request whose version it does not recognise
// (the empty version of a client that never accepted anything, or another
// process's version) with everything it has, even when the request is a
// NACK of that very response; grpc-go NACKs the resend at once, a loop of
// tens of thousands of pairs a second. A NACK is therefore watched as if the
// client had the rejected version: the next response comes with the next
// change.
//
// caches is safe for concurrent use.
type caches struct {
	prefix string // version prefix, unique to this process
	lds    *cachev3.LinearCache
	// rds holds the routes in each form (routeForm): the call policy as
	// it is, and without what some clients misapply.
	rds      [numRouteForms]*cachev3.LinearCache
	cds      *cachev3.LinearCache
	maxZones int
	metadata bool // endpoints carry their instance (WithEndpointMetadata)
	policies bool // call policies are followed (WithPolicies): every Cluster carries its parts
	log      *slog.Logger

	mu          sync.Mutex
	services    map[string][]registry.Instance // usable instances per published service
	ringHash    map[string]bool                // published services whose policy is RingHash
	configs     map[string]musterConfig        // balancer config in the published Cluster, per service whose policy takesWeights
	bytes       map[string]*endpointBytes      // serialized endpoints per published service
	coloring    map[string]coloring            // colors and canary in the published route, per service
	clusterCall map[string]registry.Policy     // cluster parts of the call policy in the published Clusters, per service
	eds         map[locality]*zoneCache        // by client locality; zero for clients without one
	overflow    bool                           // a locality was refused for maxZones (logged once)

	// unknown, if set, is called (without locks held) when a client asks
	// for a listener of a service that is not published.
	unknown func()
	// check, if set (WithSelfCheck), is called with every resource before
	// it is published, and the client families it reaches, c.mu held.
	check func(types.Resource, xdscheck.Family)
}

// zoneCache holds the endpoints for the clients of one locality.
type zoneCache struct {
	loc  locality
	c    *cachev3.LinearCache
	sent map[string]*endpointv3.ClusterLoadAssignment // last set, per service
}

var _ cachev3.Cache = (*caches)(nil)

func newCaches(prefix string, maxZones int, metadata, policies bool, log *slog.Logger) *caches {
	lc := func(typ string) *cachev3.LinearCache {
		return cachev3.NewLinearCache(typ, cachev3.WithVersionPrefix(prefix))
	}
	c := &caches{
		prefix:      prefix,
		lds:         lc(resourcev3.ListenerType),
		cds:         lc(resourcev3.ClusterType),
		maxZones:    maxZones,
		metadata:    metadata,
		policies:    policies,
		log:         log,
		services:    map[string][]registry.Instance{},
		ringHash:    map[string]bool{},
		configs:     map[string]musterConfig{},
		bytes:       map[string]*endpointBytes{},
		coloring:    map[string]coloring{},
		clusterCall: map[string]registry.Policy{},
		eds:         map[locality]*zoneCache{},
	}
	for f := range c.rds {
		c.rds[f] = lc(resourcev3.RouteType)
	}
	return c
}

// setService publishes a service's usable instances, with canary the
// service's canary setting (zero for none). The first call for a service
// publishes its Listener, Route and Cluster too; a later one publishes a
// Cluster again when p takesWeights and its balancer config changed: the
// weight table, or with ss (the service's slow start; off for none) the
// registration times of the instances still ramping (before the endpoints,
// so that a new instance's weight and age are known when it arrives). The clusters of colors (colors.go) are published when a color
// appears, before its endpoints and the route that names them, and removed
// after the route that no longer does; the route is published again only
// when the colors or the applicable canary change. An assignment equal to
// the one already published for a zone is not set again, so clients get no
// response for it. call is the service's call policy (zero for none): its
// route parts go into every route, its cluster parts into every Cluster,
// each published again when they change (see callpolicy.go).
func (c *caches) setService(service string, p LBPolicy, ss slowStart, list []registry.Instance, canary registry.Canary, call registry.Policy, first bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var mc musterConfig
	if p.takesWeights() {
		mc = musterConfig{weights: weightTable(list), slowStart: slowStartFor(ss, list, time.Now())}
	}
	co := coloring{colors: colorsOf(list), canary: canary, hash: p == RingHash, call: routeParts(call)}
	prev := c.coloring[service]
	if first {
		l, err := listenerFor(service)
		if err != nil {
			return err
		}
		if err := c.update(c.lds, service, l); err != nil {
			return fmt.Errorf("xds: listener %s: %w", service, err)
		}
	}
	tableChanged := p.takesWeights() && !mc.equal(c.configs[service])
	cc := clusterParts(call)
	callChanged := !samePolicy(c.clusterCall[service], cc)
	for _, name := range clusterNames(service, co.colors) {
		isNew := first || name != service && !slices.Contains(clusterNames(service, prev.colors), name)
		if isNew || tableChanged || callChanged {
			cl := clusterFor(name, p, mc)
			if c.policies {
				applyClusterPolicy(cl, cc)
			}
			if err := c.update(c.cds, name, cl); err != nil {
				return fmt.Errorf("xds: cluster %s: %w", name, err)
			}
		}
	}
	if p.takesWeights() {
		c.configs[service] = mc
	}
	c.clusterCall[service] = cc
	var gone []string
	for _, name := range clusterNames(service, prev.colors) {
		if !slices.Contains(clusterNames(service, co.colors), name) {
			gone = append(gone, name)
		}
	}
	c.services[service] = list
	c.ringHash[service] = p == RingHash
	eb := c.bytes[service]
	if eb == nil {
		eb = &endpointBytes{}
		c.bytes[service] = eb
	}
	var errs []error
	for _, zc := range c.eds {
		if err := zc.set(service, list, c.view(zc.loc, service), eb, gone, c.update); err != nil {
			errs = append(errs, err)
		}
	}
	eb.keepOnly(list)
	if first || !co.equal(prev) {
		full := routeWithColors(service, co)
		for f, lc := range c.rds {
			route := full // one route for the forms the policy does not differ in
			if call := routeForm(f).apply(co.call); !samePolicy(call, co.call) {
				form := co
				form.call = call
				route = routeWithColors(service, form)
			}
			if err := c.updateFor(lc, service, route, routeForm(f).audience()); err != nil {
				errs = append(errs, fmt.Errorf("xds: route %s: %w", service, err))
			}
		}
	}
	c.coloring[service] = co
	for _, name := range gone {
		if err := c.cds.DeleteResource(name); err != nil {
			errs = append(errs, fmt.Errorf("xds: remove cluster %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// update publishes res, which every client gets, as name in lc, after
// the self-check (c.check). c.mu must be held.
func (c *caches) update(lc *cachev3.LinearCache, name string, res types.Resource) error {
	return c.updateFor(lc, name, res, xdscheck.AllClients)
}

// updateFor is update for a resource the clients of audience get.
func (c *caches) updateFor(lc *cachev3.LinearCache, name string, res types.Resource, audience xdscheck.Family) error {
	if c.check != nil {
		c.check(res, audience)
	}
	return lc.UpdateResource(name, res)
}

// view returns the view of service's assignments for clients in l.
// c.mu must be held.
func (c *caches) view(l locality, service string) view {
	return view{region: l.region, zone: l.zone, ringHash: c.ringHash[service], metadata: c.metadata}
}

// String is l as Stats.Zones and the logs show it: the zone, after the
// region and a slash when there is one.
func (l locality) String() string {
	if l.region == "" {
		return l.zone
	}
	return l.region + "/" + l.zone
}

// set publishes the assignments of service for the locality's clients
// with update (caches.update), and removes those named gone.
func (zc *zoneCache) set(service string, list []registry.Instance, v view, eb *endpointBytes, gone []string,
	update func(*cachev3.LinearCache, string, types.Resource) error) error {
	var errs []error
	for name, cla := range assignments(service, list, v, eb.wireAssignment) {
		if prev, ok := zc.sent[name]; ok && proto.Equal(prev, cla) {
			continue
		}
		if err := update(zc.c, name, cla); err != nil {
			errs = append(errs, fmt.Errorf("xds: endpoints %s for locality %q: %w", name, zc.loc, err))
			continue
		}
		zc.sent[name] = cla
	}
	return errors.Join(append(errs, zc.remove(gone))...)
}

// remove removes the assignments named names.
func (zc *zoneCache) remove(names []string) error {
	var errs []error
	for _, name := range names {
		delete(zc.sent, name)
		if err := zc.c.DeleteResource(name); err != nil {
			errs = append(errs, fmt.Errorf("xds: remove endpoints %s for locality %q: %w", name, zc.loc, err))
		}
	}
	return errors.Join(errs...)
}

// endpointsFor returns the endpoint cache of clients in l, creating it
// (with every service's assignment for that locality) on first use. Beyond
// maxZones localities, clients are served the cache of clients without a
// locality.
func (c *caches) endpointsFor(l locality) *cachev3.LinearCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	if zc, ok := c.eds[l]; ok {
		return zc.c
	}
	if l != (locality{}) && len(c.eds) >= c.maxZones {
		if !c.overflow {
			c.overflow = true
			c.log.Warn("xds: too many client localities; clients of further localities get no locality preference",
				"max_zones", c.maxZones, "locality", clipTo(l.String(), 128))
		}
		return c.endpointsForLocked(locality{})
	}
	return c.endpointsForLocked(l)
}

func (c *caches) endpointsForLocked(l locality) *cachev3.LinearCache {
	if zc, ok := c.eds[l]; ok {
		return zc.c
	}
	zc := &zoneCache{loc: l, sent: map[string]*endpointv3.ClusterLoadAssignment{}}
	initial := make(map[string]types.Resource, len(c.services))
	for svc, list := range c.services {
		for name, cla := range assignments(svc, list, c.view(l, svc), c.bytes[svc].wireAssignment) {
			if c.check != nil {
				c.check(cla, xdscheck.AllClients)
			}
			initial[name] = cla
			zc.sent[name] = cla
		}
	}
	zc.c = cachev3.NewLinearCache(resourcev3.EndpointType,
		cachev3.WithVersionPrefix(c.prefix), cachev3.WithInitialResources(initial))
	c.eds[l] = zc
	return zc.c
}

// anyUnknown reports whether a name is not a published service.
func (c *caches) anyUnknown(names []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		if _, ok := c.services[n]; !ok {
			return true
		}
	}
	return false
}

// published returns the number of services published.
func (c *caches) published() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.services)
}

// zones returns the client localities with an endpoint cache, as
// locality.String shows them, sorted.
func (c *caches) zones() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	zs := make([]string, 0, len(c.eds))
	for l := range c.eds {
		zs = append(zs, l.String())
	}
	sort.Strings(zs)
	return zs
}

func (c *caches) forType(typeURL string, node *corev3.Node) (*cachev3.LinearCache, error) {
	switch typeURL {
	case resourcev3.ListenerType:
		return c.lds, nil
	case resourcev3.RouteType:
		return c.rds[formOf(node)], nil
	case resourcev3.ClusterType:
		return c.cds, nil
	case resourcev3.EndpointType:
		return c.endpointsFor(locality{node.GetLocality().GetRegion(), node.GetLocality().GetZone()}), nil
	}
	return nil, fmt.Errorf("xds: resource type %q is not served", typeURL)
}

// CreateWatch implements cachev3.ConfigWatcher for state-of-the-world
// streams.
func (c *caches) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	lc, err := c.forType(req.GetTypeUrl(), req.GetNode())
	if err != nil {
		return nil, err
	}
	c.askedFor(req.GetTypeUrl(), req.GetResourceNames())
	if req.GetErrorDetail() != nil && !strings.HasPrefix(req.GetVersionInfo(), c.prefix) {
		// A NACK the LinearCache would answer with the rejected
		// resources again: make it compare versions instead.
		req = proto.Clone(req).(*cachev3.Request)
		req.VersionInfo = c.prefix + "nack"
	}
	return lc.CreateWatch(req, sub, ch)
}

// askedFor calls unknown if a request for resources of typeURL names a
// listener that is not published.
func (c *caches) askedFor(typeURL string, names []string) {
	if c.unknown != nil && typeURL == resourcev3.ListenerType && c.anyUnknown(names) {
		c.unknown()
	}
}

// CreateDeltaWatch implements cachev3.ConfigWatcher for delta streams.
//
// A NACK needs nothing here: go-control-plane's delta server records the
// versions of a response when it sends it, not when the client accepts it,
// and a NACK is a request like any other, so the LinearCache compares the
// rejected versions with its own and answers with the next change only
// (docs/XDS.md, "Delta streams").
func (c *caches) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	lc, err := c.forType(req.GetTypeUrl(), req.GetNode())
	if err != nil {
		return nil, err
	}
	c.askedFor(req.GetTypeUrl(), req.GetResourceNamesSubscribe())
	return lc.CreateDeltaWatch(req, sub, ch)
}

// Fetch implements cachev3.ConfigFetcher. REST fetches are not served.
func (c *caches) Fetch(context.Context, *cachev3.Request) (cachev3.Response, error) {
	return nil, errors.New("xds: REST fetch is not served")
}
