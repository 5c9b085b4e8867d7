package resolver

import (
	"google.golang.org/grpc/attributes"
	grpcresolver "google.golang.org/grpc/resolver"
)

// Locality is where a client runs: its region and its zone, either empty
// when unknown.
type Locality struct {
	Region, Zone string
}

// localityKey is the state attribute key of the client's locality.
type localityKey struct{}

// LocalityOf returns the locality of the client a state is for, for
// balancers that prefer near instances (muster_p2c, muster_wrr): the
// channel's target region= and zone=, else the Builder's WithRegion and
// WithZone. ok is false when the state carries none: no locality is known,
// or WithZoneFallback(false) already kept only the near instances.
func LocalityOf(s grpcresolver.State) (l Locality, ok bool) {
	l, ok = s.Attributes.Value(localityKey{}).(Locality)
	return l, ok
}

// stateAttributes returns the attributes of the states r pushes: the
// canary setting, the call policy and the client's locality, when there
// are any.
func (r *musterResolver) stateAttributes() *attributes.Attributes {
	a := withCanary(r.canary)
	if !r.policy.IsZero() {
		if a == nil {
			a = attributes.New(policyKey{}, policyAttr{r.policy})
		} else {
			a = a.WithValue(policyKey{}, policyAttr{r.policy})
		}
	}
	if !r.b.opts.zoneFallback || r.q.zone == "" && r.q.region == "" {
		return a
	}
	return StateWithLocality(grpcresolver.State{Attributes: a}, Locality{Region: r.q.region, Zone: r.q.zone}).Attributes
}

// StateWithLocality returns s carrying l, as the states of a channel with
// a locality do (LocalityOf reads it), for other resolvers and tests that
// feed Muster's balancers.
func StateWithLocality(s grpcresolver.State, l Locality) grpcresolver.State {
	if s.Attributes == nil {
		s.Attributes = attributes.New(localityKey{}, l)
	} else {
		s.Attributes = s.Attributes.WithValue(localityKey{}, l)
	}
	return s
}
