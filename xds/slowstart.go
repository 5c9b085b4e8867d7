package xds

import (
	"maps"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/musterhq/muster/registry"
)

// The bounds of the balancers' slow start (balancer/internal/lb), which
// their config parser enforces; TestSlowStartBounds checks they agree.
const (
	maxSlowStartWindow     = time.Hour
	minSlowStartAggression = 0.1
	maxSlowStartAggression = 10.0
)

// slowStart is the slowStart object of Muster's balancer config: the
// settings of WithSlowStart and, in a published Cluster, the registration
// times of the instances still ramping. Zero is off.
type slowStart struct {
	window           time.Duration
	aggression       float64
	minWeightPercent float64
	registered       map[string]time.Time // by canonical address
}

func (s slowStart) enabled() bool { return s.window > 0 }

func (s slowStart) equal(o slowStart) bool {
	return s.window == o.window && s.aggression == o.aggression && s.minWeightPercent == o.minWeightPercent &&
		maps.EqualFunc(s.registered, o.registered, time.Time.Equal)
}

// WithSlowStart gives the Clusters of services (of every service without
// a slow start of its own when services is empty) the slow start of
// Muster's balancers (see balancer/p2c and balancer/wrr): an instance
// registered less than window ago gets weight × max(minWeightPercent/100,
// (age/window)^(1/aggression)) of its share, its age counted from its
// registration in the registry. The Cluster's balancer config carries the
// window, aggression and minimum, and the registration time of every
// instance still inside the window, which gRPC's xDS endpoints cannot
// carry; the balancers read both. Only a Go client that imports Muster's
// balancer ramps: a client that falls back to round robin (every other
// language) gives a new instance its full share at once (docs/XDS.md).
//
// The services' policy must be MusterP2C or MusterWRR. A window not
// positive or longer than an hour, an aggression outside 0.1..10 or a
// minimum outside 0..100 is an error of New, as is another policy.
func WithSlowStart(window time.Duration, aggression, minWeightPercent float64, services ...string) Option {
	return func(o *options) {
		switch {
		case window <= 0 || window > maxSlowStartWindow:
			o.invalid("WithSlowStart: window %v is out of range (0, %v]", window, maxSlowStartWindow)
			return
		case math.IsNaN(aggression) || aggression < minSlowStartAggression || aggression > maxSlowStartAggression:
			o.invalid("WithSlowStart: aggression %v is out of range %v..%v", aggression, minSlowStartAggression, maxSlowStartAggression)
			return
		case math.IsNaN(minWeightPercent) || minWeightPercent < 0 || minWeightPercent > 100:
			o.invalid("WithSlowStart: minWeightPercent %v is out of range 0..100", minWeightPercent)
			return
		}
		c := slowStart{window: window, aggression: aggression, minWeightPercent: minWeightPercent}
		if len(services) == 0 {
			o.slowStart = c
		}
		for _, s := range services {
			o.slowStarts[s] = c
		}
	}
}

// checkSlowStart reports a slow start given to a service (or to every
// service) whose policy is not one of Muster's balancers.
func (o *options) checkSlowStart() {
	if o.slowStart.enabled() {
		if p := o.policy; !p.takesWeights() {
			o.invalid("WithSlowStart: the default policy %s has no slow start (want %s or %s)", p, MusterP2C, MusterWRR)
		}
	}
	for s := range o.slowStarts {
		if p := o.policyOf(s); !p.takesWeights() {
			o.invalid("WithSlowStart: service %s: policy %s has no slow start (want %s or %s)", s, p, MusterP2C, MusterWRR)
		}
	}
}

// policyOf returns a service's policy.
func (o *options) policyOf(service string) LBPolicy {
	if p, ok := o.policies[service]; ok {
		return p
	}
	return o.policy
}

// slowStartOf returns a service's slow start; off for a policy that is not
// one of Muster's balancers.
func (o *options) slowStartOf(service string) slowStart {
	if !o.policyOf(service).takesWeights() {
		return slowStart{}
	}
	if c, ok := o.slowStarts[service]; ok {
		return c
	}
	return o.slowStart
}

// musterConfig is what the balancer config of Muster's balancers carries
// in a Cluster: the weights that are not the default (weightTable) and,
// with slow start, its settings and the registration times of the
// instances still ramping (slowStartFor).
type musterConfig struct {
	weights   map[string]int
	slowStart slowStart
}

func (m musterConfig) equal(o musterConfig) bool {
	return maps.Equal(m.weights, o.weights) && m.slowStart.equal(o.slowStart)
}

// fields returns the config's fields of the TypedStruct; nil when it has
// none.
func (m musterConfig) fields() map[string]*structpb.Value {
	f := map[string]*structpb.Value{}
	if len(m.weights) > 0 {
		table := make(map[string]*structpb.Value, len(m.weights))
		for addr, w := range m.weights {
			table[addr] = structpb.NewNumberValue(float64(w))
		}
		f[endpointWeightsField] = structpb.NewStructValue(&structpb.Struct{Fields: table})
	}
	if ss := m.slowStart; ss.enabled() {
		s := map[string]*structpb.Value{
			"window":           structpb.NewStringValue(ss.window.String()),
			"aggression":       structpb.NewNumberValue(ss.aggression),
			"minWeightPercent": structpb.NewNumberValue(ss.minWeightPercent),
		}
		if len(ss.registered) > 0 {
			table := make(map[string]*structpb.Value, len(ss.registered))
			for addr, t := range ss.registered {
				table[addr] = structpb.NewStringValue(t.UTC().Format(time.RFC3339Nano))
			}
			s["registeredAt"] = structpb.NewStructValue(&structpb.Struct{Fields: table})
		}
		f[slowStartField] = structpb.NewStructValue(&structpb.Struct{Fields: s})
	}
	if len(f) == 0 {
		return nil
	}
	return f
}

// slowStartField is the field of Muster's balancer configs that holds
// their slow start (balancer/internal/lb ParseSlowStartConfig reads it).
const slowStartField = "slowStart"

// slowStartFor returns ss with the registration times of the instances of
// list (as prepare returns them: canonical addresses) registered less than
// its window before now: those a balancer still ramps. An instance older
// than that, or without a registration time, is left out: the balancer
// gives it its full share. Off (zero) when ss is.
func slowStartFor(ss slowStart, list []registry.Instance, now time.Time) slowStart {
	if !ss.enabled() {
		return slowStart{}
	}
	ss.registered = nil
	for _, in := range list {
		if in.RegisteredAt.IsZero() || now.Sub(in.RegisteredAt) >= ss.window {
			continue
		}
		if ss.registered == nil {
			ss.registered = map[string]time.Time{}
		}
		ss.registered[in.Addr] = in.RegisteredAt
	}
	return ss
}
