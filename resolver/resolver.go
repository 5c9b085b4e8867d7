package resolver

import (
	"log/slog"

	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/musterhq/muster/internal/lbattr"
	"github.com/musterhq/muster/internal/served"
)

// musterResolver feeds one channel: it is its target's follower's consumer
// (package served makes every list: filters, protection, grace, subsetting,
// settings) and turns each list into the channel's state, with the
// channel's balancer and service config. ResolveNow is a no-op because the
// watch pushes every change.
type musterResolver struct {
	b   *Builder
	cc  grpcresolver.ClientConn
	q   query
	f   *served.Follower
	log *slog.Logger

	// What follows is written only from Serve, which the follower calls
	// one at a time.
	lbConfig  string                     // the loadBalancingConfig handed to the channel; "" for none (channelBalancer)
	byDefault bool                       // lbConfig is DefaultBalancer's, to be settled at the first push (decideDefault)
	sc        *serviceconfig.ParseResult // the service config handed, once made
	scFor     uint64                     // the settings' count (served.List.Settings) sc was made for
}

var _ served.Consumer = (*musterResolver)(nil)

// ResolveNow does nothing: the channel already gets every change as it
// happens. It is cheap and starts no goroutine.
func (r *musterResolver) ResolveNow(grpcresolver.ResolveNowOptions) {}

// Close stops the resolver; once it returns, the channel is called no
// more.
func (r *musterResolver) Close() { r.f.Close() }

// Serve hands the channel l's endpoints, with the service's canary
// setting, call policy and the channel's service config (its balancer
// and, with WithPolicyServiceConfig, the call policy's method config).
func (r *musterResolver) Serve(l served.List) {
	e, _ := l.Built.(*endpoints)
	state := grpcresolver.State{Endpoints: e.eps, Addresses: e.addrs, Attributes: r.stateAttributes(l)}
	if len(e.eps) == 0 {
		state.Attributes = lbattr.WithEmptyReason(state.Attributes, l.Why)
	}
	if r.byDefault {
		r.decideDefault(state, l)
	}
	state.ServiceConfig = r.serviceConfig(l)
	// An error here (for example: no endpoints for round_robin) makes gRPC
	// call ResolveNow with backoff; the next change is pushed anyway.
	_ = r.cc.UpdateState(state)
	e.prepare()
}

// Fail reports to the channel that nothing is known of its service yet.
func (r *musterResolver) Fail(err error) { r.cc.ReportError(err) }
