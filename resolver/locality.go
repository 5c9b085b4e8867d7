package resolver

import (
	"google.golang.org/grpc/attributes"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/internal/served"
	"github.com/musterhq/muster/registry"
)

// Locality is where a client runs: its region and its zone, either empty
// when unknown.
type Locality = lbattr.Locality

// LocalityOf returns the locality of the client a state is for, for
// balancers that prefer near instances (muster_p2c, muster_wrr): the
// channel's target region= and zone=, else the Builder's WithRegion and
// WithZone. ok is false when the state carries none: no locality is known,
// or WithZoneFallback(false) already kept only the near instances.
func LocalityOf(s grpcresolver.State) (l Locality, ok bool) {
	return lbattr.LocalityOf(s)
}

// stateAttributes returns the attributes of the state r makes of l: the
// canary setting, the call policy and the client's locality, when there
// are any.
func (r *musterResolver) stateAttributes(l served.List) *attributes.Attributes {
	withLocality := r.b.opts.served.ZoneFallback && (r.q.Zone != "" || r.q.Region != "")
	return lbattr.StateAttributes(nil, l.Canary, l.Policy, Locality{Region: r.q.Region, Zone: r.q.Zone}, withLocality)
}

// StateWithLocality returns s carrying l, as the states of a channel with
// a locality do (LocalityOf reads it), for other resolvers and tests that
// feed Muster's balancers.
func StateWithLocality(s grpcresolver.State, l Locality) grpcresolver.State {
	s.Attributes = lbattr.StateAttributes(s.Attributes, registry.Canary{}, registry.Policy{}, l, true)
	return s
}
