package resolver

import (
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/registry"
)

// WithCanaries makes the Builder follow each service's canary setting in
// src (registry/etcd's Canaries) and hand it to the balancer with every
// state, as a state attribute that CanaryOf reads; a change of the setting
// pushes the same endpoints again with the new one, so Muster's balancers
// apply it without a client restart. The setting is followed once per
// service for all the Builder's channels of the service (one etcd watch,
// not one per channel). nil (the default) follows none: the
// balancers then send no uncolored call to a color.
func WithCanaries(src registry.CanarySource) Option {
	return func(o *options) { o.served.Canaries = src }
}

// CanaryOf returns the canary setting a state carries (see WithCanaries),
// for balancers; ok is false when it carries none or one of 0 %.
func CanaryOf(s grpcresolver.State) (c registry.Canary, ok bool) {
	return lbattr.CanaryOf(s)
}
