package resolver

import (
	"encoding/json"

	"google.golang.org/grpc/balancer"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/musterhq/muster/balancer/p2c"
	"github.com/musterhq/muster/balancer/wrr"
	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/internal/served"
)

// DefaultBalancer is the balancer of a channel that chooses none: the
// resolver hands the channel a service config naming it. Importing this
// package registers it (and muster_wrr) with gRPC.
const DefaultBalancer = p2c.Name

// targetBalancers are the short names a target's lb= takes besides the
// name of any balancer registered with gRPC.
var targetBalancers = map[string]string{"p2c": p2c.Name, "wrr": wrr.Name}

// WithBalancer sets the balancer of the Builder's channels whose target
// names none (lb=): the resolver hands each channel a service config whose
// loadBalancingConfig is [{"<name>":{}}]. A service config from the
// resolver replaces the one given with grpc.WithDefaultServiceConfig
// (gRPC's rule), so the empty name hands none: the channel then takes its
// balancer from grpc.WithDefaultServiceConfig, or runs gRPC's pick_first.
//
// Without this option channels balance with DefaultBalancer (muster_p2c),
// except a channel whose own default service config already runs one of
// Muster's balancers (grpc.WithDefaultServiceConfig naming muster_p2c or
// muster_wrr, with their settings and method configs): it keeps it, and
// the resolver hands it none. A name no balancer is registered under is an
// error, as is giving WithPolicyServiceConfig too (both choose the
// loadBalancingConfig).
func WithBalancer(name string) Option {
	return func(o *options) {
		if name != "" && balancer.Get(name) == nil {
			o.invalid("WithBalancer(%q): no balancer is registered with gRPC under that name (import its package)", name)
			return
		}
		o.lb, o.lbSet = name, true
	}
}

// lbConfig returns the loadBalancingConfig JSON naming the balancer name
// with its default settings.
func lbConfig(name string) string {
	js, err := json.Marshal([]map[string]struct{}{{name: {}}})
	if err != nil {
		return "" // a string always marshals
	}
	return string(js)
}

// targetBalancer returns the balancer a target's lb= value names: a short
// name (p2c, wrr) or a registered balancer's; ok is false for neither.
func targetBalancer(v string) (name string, ok bool) {
	if n, ok := targetBalancers[v]; ok {
		return n, true
	}
	return v, balancer.Get(v) != nil
}

// channelBalancer returns the loadBalancingConfig the resolver hands a
// channel whose target names the balancer targetLB ("" for none), "" for
// none; byDefault says that no choice was made (DefaultBalancer, unless
// the channel's own default service config runs one of Muster's
// balancers: decideDefault). In order: a channel that disables service
// configs from its resolver (grpc.WithDisableServiceConfig) is handed
// none; the target's lb= wins over the Builder's choice
// (WithPolicyServiceConfig or WithBalancer), which wins over the default.
func (b *Builder) channelBalancer(targetLB string, bo grpcresolver.BuildOptions) (config string, byDefault bool) {
	switch {
	case bo.DisableServiceConfig:
		return "", false
	case targetLB != "":
		return lbConfig(targetLB), false
	case b.opts.policyLB != "":
		return b.opts.policyLB, false
	case b.opts.lbSet && b.opts.lb == "":
		return "", false
	case b.opts.lbSet:
		return lbConfig(b.opts.lb), false
	}
	return lbConfig(DefaultBalancer), true
}

// decideDefault settles, at the channel's first state, whether a channel
// that chose no balancer through Muster gets DefaultBalancer. gRPC applies
// the channel's own default service config (grpc.WithDefaultServiceConfig)
// only while the resolver hands none, and the resolver cannot see that
// option; so it hands this first state without one, carrying a receipt
// that Muster's balancers sign (lbattr.Receipt). Signed, the channel's own
// config runs a Muster balancer: the user chose it, with its settings, and
// the resolver hands no service config, now or later. Unsigned, the
// channel runs gRPC's pick_first, or a balancer of gRPC's that the user
// chose (the resolver cannot tell them apart): from now on it is handed
// DefaultBalancer, which replaces that choice, and the Builder says so once
// in its log.
func (r *musterResolver) decideDefault(st grpcresolver.State, l served.List) {
	sc := r.serviceConfig(l)
	r.byDefault = false
	if sc == nil {
		r.lbConfig = "" // a ClientConn that parses no service config
		return
	}
	var rc lbattr.Receipt
	st.Attributes = lbattr.WithReceipt(st.Attributes, &rc)
	_ = r.cc.UpdateState(st)
	if rc.Signed() {
		r.lbConfig, r.sc = "", nil
		r.log.Debug("the channel's own service config runs a Muster balancer; the resolver hands none")
		return
	}
	r.b.defaultNotice.Do(func() {
		r.log.Info("channels without a balancer of Muster's balance with "+DefaultBalancer+": the resolver hands them a service config, "+
			"which replaces gRPC's pick_first and any balancer chosen with grpc.WithDefaultServiceConfig; "+
			"keep gRPC's with grpc.WithDisableServiceConfig() or resolver.WithBalancer(\"\"), or choose with resolver.WithBalancer or the target's lb=",
			"balancer", DefaultBalancer)
	})
}
