package lb

import (
	"cmp"
	"fmt"
	estats "google.golang.org/grpc/experimental/stats"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/grpclog"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
)

var logger = grpclog.Component("muster-balancer")

// minRetention is the shortest time the stats of an endpoint that left the
// resolver state are kept; an endpoint that comes back within it (a
// re-registration, a flapping resolver) finds its latency, failures and
// ejection as they were. The retention is the longer of this and the
// maximum ejection time, so that leaving and coming back never ends an
// ejection early.
const minRetention = 5 * time.Minute

// Endpoint is the state a balancer keeps for one endpoint (with the Muster
// resolver: one instance address). It outlives pickers: a picker holds
// pointers to the Endpoints it picks from, and the next picker gets the
// same ones. It is created when the endpoint first appears in the resolver
// state and dropped a retention time after the endpoint left it.
type Endpoint[T any] struct {
	// Addr is the endpoint's first address.
	Addr string
	// Outlier is the endpoint's ejection state.
	Outlier OutlierState
	// Stats is the policy's own state for the endpoint.
	Stats T

	key       string
	keyedDone func(balancer.DoneInfo) // Done of keyed calls (affinityPicker); made once under Base.mu
	wasReady  bool                    // has been READY; guarded by Base.mu
	gen       uint64                  // Base.gen of the last resolver state listing it
	removedAt int64                   // Nanotime when it left the resolver state; 0 while listed
}

// Ready is one READY endpoint, as handed to Policy.NewPicker.
type Ready[T any] struct {
	// Endpoint is the endpoint's state.
	Endpoint *Endpoint[T]
	// Picker is the endpoint's pick_first picker; it returns the endpoint's
	// SubConn.
	Picker balancer.Picker
	// Weight is the endpoint's weight, > 0 (see Base).
	Weight int

	color    string            // see ColorConfig; "" for the base
	level    registry.Nearness // how near the client it runs (see Locality)
	capacity float64           // its weight as its level's capacity counts it: ramped, unscaled; 0 while draining
}

// Plugin is what a balancing policy (muster_p2c, muster_wrr) plugs into Base.
type Plugin[T any] struct {
	// Name is the policy's name, for errors and logs.
	Name string
	// Init prepares a new Endpoint's Stats. It is called once per
	// Endpoint, under Base's lock, before any picker holds it. May be nil.
	Init func(e *Endpoint[T])
	// NewPicker returns a picker over ready, which is never empty, is
	// sorted by address, and belongs to the callee. It is called under
	// Base's lock each time an endpoint changes state or the resolver state
	// changes: once over every READY endpoint, or, when routing by color,
	// once per color present and once over the base (see ColorConfig).
	NewPicker func(ready []Ready[T]) balancer.Picker
	// Calls returns the calls to e that completed with a result, for the
	// calls metric. May be nil: then OutlierState.CountCall keeps the
	// count.
	Calls func(e *Endpoint[T]) uint64
}

// Base is the part of a Muster balancer that every policy shares. It runs
// grpc-go's endpointsharding balancer with a pick_first child per endpoint
// (so that client-side health checking works: a child whose health check
// fails leaves READY), keeps an Endpoint per endpoint across pickers, and
// whenever at least one endpoint is READY replaces endpointsharding's round
// robin picker with the policy's. With none READY it passes
// endpointsharding's state on (CONNECTING, TRANSIENT_FAILURE, ...).
//
// Weights: an endpoint's weight is its Muster instance's, else its entry
// in the config's EndpointWeights table (Config.Weights), else
// registry.DefaultWeight. An endpoint of weight 0 (a draining instance) is left out of
// the policy's pickers unless every READY endpoint has weight 0; then all
// are handed over with the same weight.
//
// Colors: when some READY endpoint has a color (ColorConfig), the picker
// routes each call to a policy picker over the endpoints of the call's
// color, or over the base; see route.
//
// Circuit breaking: when the resolver state carries a call policy with
// maxConcurrent (resolver.WithPolicies), the picker admits at most that many
// calls in flight on the channel, counted across pickers, and fails the
// others at once with codes.Unavailable naming the limit; see capPicker.
//
// Outlier ejection: the balancer config's, with the call policy's
// failure-percentage ejection when the resolver state carries one that
// sets it (OutlierConfig.WithPolicy: the policy's values win).
//
// Canary keys: the call's key is color.WithKey's, else its x-muster-key
// header, or the header the call policy's affinityHeader names.
//
// Affinity: when the call policy sets affinityHeader, a call with a key
// (as for canaries) goes to the endpoint weighted rendezvous hashing
// chooses for it among its group's READY endpoints not ejected, whatever
// their locality level; calls without a key are picked as without it.
// See affinityPicker.
//
// Slow start: with a SlowStartConfig, an endpoint whose instance
// registered less than its window ago is handed to the policy with a
// ramped weight (every weight scaled by rampScale, to keep the ramp's
// precision), and while one ramps the picker is rebuilt from the last
// children's state every step of the window; see SlowStartConfig.
//
// Locality: when the resolver state says where the client runs
// (lbattr.LocalityOf), each group of endpoints (the base, a color) is
// split in levels by registry.Near: the client's zone, the rest of its
// region, everything else. Each level takes the share of the calls that
// Spill gives it from its healthy fraction (READY, not ejected, not
// draining; by weight, a draining endpoint counting DefaultWeight), with
// the LocalityConfig's overprovisioning factor, and the level's policy
// picker picks within it; a level with no admissible endpoint
// (OutlierState.Admissible) passes the pick on, and a level whose probe is
// due takes the pick first; see localityPicker. Without a locality, one
// policy picker over the group.
//
// Base implements balancer.Balancer except UpdateClientConnState, which the
// policy implements to parse its config and then calls Update. gRPC
// serialises calls to a balancer; Base is also called by its children from
// other goroutines and locks accordingly.
type Base[T any] struct {
	// Detector ejects this balancer's endpoints; pickers and Done
	// callbacks use it.
	Detector Detector

	cc         balancer.ClientConn
	policy     Plugin[T]
	child      balancer.Balancer
	now        func() int64
	target     string
	stopReport func() // ends the metrics reporting

	mu        sync.Mutex
	endpoints map[string]*Endpoint[T]
	gen       uint64
	listed    int             // endpoints in the last resolver state
	cfg       Config          // from the last Update; its Weights and Registered tables read-only
	canary    registry.Canary // from the last resolver state; zero for none
	local     lbattr.Locality
	localOK   bool                     // local is known (lbattr.LocalityOf)
	capacity  map[string]levelCapacity // per group (color; "" the base)
	tracks    map[string]*healthTrack  // per group, across pickers
	maxCalls  int64                    // the call policy's maxConcurrent; 0: no cap
	affinity  string                   // the call policy's affinityHeader; "" for none
	last      balancer.State           // endpointsharding's last state, for rebuilding during a ramp
	rampTimer *time.Timer              // rebuilds the picker during a ramp; nil when none is due
	closed    bool

	inFlight atomic.Int64 // calls picked and not done, for maxCalls; across pickers
}

// New returns a Base for the policy, to be embedded in the policy's
// balancer.
func New[T any](cc balancer.ClientConn, opts balancer.BuildOptions, p Plugin[T]) *Base[T] {
	b := &Base[T]{
		cc:        cc,
		policy:    p,
		now:       Nanotime,
		endpoints: map[string]*Endpoint[T]{},
	}
	b.Detector.name = p.Name
	b.child = endpointsharding.NewBalancer(interceptor[T]{ClientConn: cc, b: b}, opts,
		balancer.Get(pickfirst.Name).Build, endpointsharding.Options{})
	b.target = opts.Target.String()
	b.stopReport = cc.MetricsRecorder().RegisterAsyncReporter(estats.AsyncMetricReporterFunc(b.report), asyncMetrics...)
	return b
}

// interceptor is the ClientConn endpointsharding talks to: it passes
// everything to the real one except UpdateState.
type interceptor[T any] struct {
	balancer.ClientConn
	b *Base[T]
}

func (i interceptor[T]) UpdateState(s balancer.State) { i.b.updateState(s) }

// Update applies a new resolver state and the shared part of the policy's
// config (as ParseConfig returned it): it creates the Endpoints of new
// endpoints, starts the retention of those that left, and hands the state
// to the children, which makes a new picker (with the new config even when
// the endpoints are the same). It returns balancer.ErrBadResolverState for
// a state without endpoints (gRPC then asks the resolver again, with
// backoff).
func (b *Base[T]) Update(s balancer.ClientConnState, cfg Config) error {
	lbattr.Sign(s.ResolverState) // tells Muster's resolver that the channel runs a Muster balancer
	cp, _ := lbattr.PolicyOf(s.ResolverState)
	oc := cfg.Outlier.WithPolicy(cp.Outlier)
	b.Detector.SetConfig(oc)
	retention := max(minRetention, oc.MaxEjectionTime)

	b.mu.Lock()
	now := b.now()
	b.gen++
	b.listed = 0
	b.cfg = cfg
	b.canary, _ = lbattr.CanaryOf(s.ResolverState)
	b.local, b.localOK = lbattr.LocalityOf(s.ResolverState)
	b.maxCalls = int64(cp.MaxConcurrent)
	b.affinity = cp.AffinityHeader
	for _, ep := range s.ResolverState.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		k := Key(ep)
		e := b.endpoints[k]
		if e == nil {
			e = &Endpoint[T]{Addr: ep.Addresses[0].Addr, key: k}
			e.Outlier.addr = e.Addr
			e.Outlier.changes = &b.Detector.changes
			if b.policy.Init != nil {
				b.policy.Init(e)
			}
			b.endpoints[k] = e
		}
		if e.gen != b.gen {
			b.listed++
		}
		e.gen, e.removedAt = b.gen, 0
	}
	for k, e := range b.endpoints {
		switch {
		case e.gen == b.gen:
		case e.removedAt == 0:
			e.removedAt = max(now, 1)
		case now-e.removedAt > int64(retention):
			delete(b.endpoints, k)
		}
	}
	listed := b.listed
	b.mu.Unlock()

	// Calls updateState (inline) once the children have the new state.
	err := b.child.UpdateClientConnState(balancer.ClientConnState{
		// Lets the pick_first children run client-side health checks
		// when the service config asks for them.
		ResolverState: pickfirst.EnableHealthListener(s.ResolverState),
	})
	if listed == 0 {
		b.cc.UpdateState(balancer.State{
			ConnectivityState: connectivity.TransientFailure,
			Picker:            base.NewErrPicker(noEndpoints(b.policy.Name, s.ResolverState)),
		})
		return balancer.ErrBadResolverState
	}
	return err
}

// ResolverError passes the error to the children, which keep using the
// last good state. Before any endpoint is known it makes calls fail with
// the error.
func (b *Base[T]) ResolverError(err error) {
	b.child.ResolverError(err)
	b.mu.Lock()
	listed := b.listed
	b.mu.Unlock()
	if listed == 0 {
		b.cc.UpdateState(balancer.State{
			ConnectivityState: connectivity.TransientFailure,
			Picker:            base.NewErrPicker(fmt.Errorf("%s: name resolver error: %w", b.policy.Name, err)),
		})
	}
}

// UpdateSubConnState is not called: SubConns report to their listeners.
func (b *Base[T]) UpdateSubConnState(sc balancer.SubConn, s balancer.SubConnState) {
	logger.Errorf("%s: UpdateSubConnState(%v, %+v) called unexpectedly", b.policy.Name, sc, s)
}

// ExitIdle makes idle children connect.
func (b *Base[T]) ExitIdle() { b.child.ExitIdle() }

// Close closes the children and drops every Endpoint.
func (b *Base[T]) Close() {
	b.stopReport()
	b.child.Close()
	b.mu.Lock()
	b.closed = true
	b.endpoints = nil
	if b.rampTimer != nil {
		b.rampTimer.Stop()
		b.rampTimer = nil
	}
	b.mu.Unlock()
	b.Detector.SetMembers(nil)
}

// Endpoints returns the Endpoints the balancer keeps, listed or retained,
// sorted by address. For tests and debugging.
func (b *Base[T]) Endpoints() []*Endpoint[T] {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*Endpoint[T], 0, len(b.endpoints))
	for _, e := range b.endpoints {
		out = append(out, e)
	}
	slices.SortFunc(out, func(x, y *Endpoint[T]) int { return cmp.Compare(x.key, y.key) })
	return out
}

// updateState receives endpointsharding's state, whose picker carries every
// child's state.
func (b *Base[T]) updateState(s balancer.State) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.last = s
	b.applyLocked(s)
}

// refreshRamp rebuilds the picker from endpointsharding's last state with
// the ramp's weights of now (see SlowStartConfig).
func (b *Base[T]) refreshRamp() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rampTimer = nil
	if b.closed {
		return
	}
	b.applyLocked(b.last)
}

// applyLocked hands gRPC the picker for endpointsharding's state s. Called
// under b.mu.
func (b *Base[T]) applyLocked(s balancer.State) {
	children := endpointsharding.ChildStatesFromPicker(s.Picker)
	ready := make([]Ready[T], 0, len(children))
	positive := 0
	var capacity map[string]levelCapacity
	if b.localOK {
		capacity = map[string]levelCapacity{}
		for _, c := range children {
			if len(c.Endpoint.Addresses) == 0 {
				continue
			}
			e := b.endpoints[Key(c.Endpoint)]
			if e == nil {
				continue
			}
			st := c.State.ConnectivityState
			if st == connectivity.Ready {
				e.wasReady = true
			}
			g := colorOf(c.Endpoint, b.cfg.Colors.Key)
			lc := capacity[g]
			lv, weight := levelOf(c.Endpoint, b.local), weightOf(c.Endpoint, b.cfg.Weights)
			lc.total[lv] += capacityWeight(weight)
			if st != connectivity.Ready && !e.wasReady && st != connectivity.TransientFailure && weight > 0 {
				lc.fresh[lv] += capacityWeight(weight) // connecting for the first time: healthy until it fails
			}
			capacity[g] = lc
		}
	}
	b.capacity = capacity
	wall := time.Now()
	var rampEnd time.Time // the earliest end of a ramp under way; zero for none
	for _, c := range children {
		if c.State.ConnectivityState != connectivity.Ready || len(c.Endpoint.Addresses) == 0 {
			continue
		}
		e := b.endpoints[Key(c.Endpoint)]
		if e == nil {
			continue // cannot happen: Update creates it before the child
		}
		w := weightOf(c.Endpoint, b.cfg.Weights)
		capacity := float64(w)
		if w > 0 {
			positive++
			if b.cfg.SlowStart.Enabled() {
				w = b.rampedLocked(c.Endpoint, w, wall, &rampEnd)
				capacity = float64(w) / rampScale // the same unit as the level's total
			}
		}
		r := Ready[T]{Endpoint: e, Picker: c.State.Picker, Weight: w, color: colorOf(c.Endpoint, b.cfg.Colors.Key), capacity: capacity}
		if b.localOK {
			r.level = levelOf(c.Endpoint, b.local)
		}
		ready = append(ready, r)
	}
	if !rampEnd.IsZero() && b.rampTimer == nil {
		b.rampTimer = time.AfterFunc(min(b.cfg.SlowStart.step(), rampEnd.Sub(wall)), b.refreshRamp)
	}
	if len(ready) == 0 {
		b.Detector.SetMembers(nil)
		b.cc.UpdateState(s)
		return
	}
	if positive == 0 {
		for i := range ready {
			ready[i].Weight = 1 // all draining: spread evenly
		}
	} else if positive < len(ready) {
		ready = slices.DeleteFunc(ready, func(r Ready[T]) bool { return r.Weight == 0 })
	}
	slices.SortFunc(ready, func(x, y Ready[T]) int { return cmp.Compare(x.Endpoint.key, y.Endpoint.key) })
	members := make([]*OutlierState, len(ready))
	for i := range ready {
		members[i] = &ready[i].Endpoint.Outlier
	}
	b.Detector.SetMembers(members)
	p := b.route(ready, b.cfg.Colors, b.canary)
	if b.maxCalls > 0 {
		p = newCapPicker(p, b.maxCalls, &b.inFlight, b.policy.Name)
	}
	b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: p})
}

// rampedLocked returns the weight w of endpoint ep under slow start at
// wall (see SlowStartConfig), and moves rampEnd to the end of its ramp
// when it ramps and that is earlier. Called under b.mu.
func (b *Base[T]) rampedLocked(ep grpcresolver.Endpoint, w int, wall time.Time, rampEnd *time.Time) int {
	registered := registeredAt(ep, b.cfg.SlowStart.Registered)
	if end, ramping := b.cfg.SlowStart.rampEnds(registered, wall); ramping && (rampEnd.IsZero() || end.Before(*rampEnd)) {
		*rampEnd = end
	}
	return ramp(w, b.cfg.SlowStart.Factor(registered, wall))
}

// newPicker returns the picker over ready, the READY endpoints of the
// group (color; "" for the base): the policy's, or with a locality a
// localityPicker over the policy's pickers of each level. Called under
// b.mu.
func (b *Base[T]) newPicker(group string, ready []Ready[T]) balancer.Picker {
	p := b.levelPicker(group, ready)
	if b.affinity == "" {
		return p
	}
	return newAffinityPicker(p, b.affinity, ready, &b.Detector, b.policy.Calls == nil)
}

// levelPicker is newPicker without affinity.
func (b *Base[T]) levelPicker(group string, ready []Ready[T]) balancer.Picker {
	if !b.localOK {
		return b.policy.NewPicker(ready)
	}
	lc := b.capacity[group]
	present := 0
	for _, c := range lc.total {
		if c > 0 {
			present++
		}
	}
	if present <= 1 {
		return b.policy.NewPicker(ready) // one level: nowhere to spill
	}
	if b.tracks == nil {
		b.tracks = map[string]*healthTrack{}
	}
	t := b.tracks[group]
	if t == nil {
		t = &healthTrack{}
		b.tracks[group] = t
	}
	return newLocalityPicker(ready, lc, b.cfg.Locality, t, &b.Detector, b.policy.NewPicker)
}

// Key identifies an endpoint by its set of addresses, as grpc-go's
// resolver.EndpointMap does: the address for a one-address endpoint.
func Key(ep grpcresolver.Endpoint) string {
	if len(ep.Addresses) == 1 {
		return ep.Addresses[0].Addr
	}
	addrs := make([]string, len(ep.Addresses))
	for i, a := range ep.Addresses {
		addrs[i] = a.Addr
	}
	sort.Strings(addrs)
	return strings.Join(addrs, "\n")
}

// noEndpoints is the error of calls while the resolver lists no endpoint:
// its reason (the service, where it was looked up, what the registry
// said) when Muster's resolver gave one.
func noEndpoints(policy string, s grpcresolver.State) error {
	if why, ok := lbattr.EmptyReasonOf(s); ok {
		return fmt.Errorf("%s: %s", policy, why)
	}
	return fmt.Errorf("%s: the resolver returned no endpoints", policy)
}
