package etcd

import (
	"context"
	"fmt"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/musterhq/muster/registry"
)

// Policies follows the call policies stored by SetPolicy, for
// resolver.WithPolicies and the xDS control plane. It is safe for
// concurrent use and holds no resources of its own: each WatchPolicy runs
// until its context ends.
type Policies struct {
	cli     *clientv3.Client
	o       options
	streams atomic.Uint64 // the gRPC stream of the watches, moved on after a silence
}

var _ registry.PolicySource = (*Policies)(nil)

// NewPolicies returns a Policies over cli. An invalid option is an error.
func NewPolicies(cli *clientv3.Client, opts ...WatchOption) (*Policies, error) {
	o := buildOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	if cli == nil {
		return nil, fmt.Errorf("etcd: NewPolicies: nil client")
	}
	return &Policies{cli: cli, o: o}, nil
}

// WatchPolicy implements registry.PolicySource, as Canaries.WatchCanary
// does for canaries: a Get, then a watch, read again after the watch ends.
// A value that does not decode is logged and read as no policy. A stored
// value that changes only who set the policy and when (WithBy) is no
// change: it is not sent.
func (p *Policies) WatchPolicy(ctx context.Context, service string) <-chan registry.Policy {
	ch := make(chan registry.Policy, 1)
	go p.follow(ctx, service, ch)
	return ch
}

// follow sends the policies of service on ch, as WatchPolicy says, until
// ctx ends; then it closes ch.
func (p *Policies) follow(ctx context.Context, service string, ch chan registry.Policy) {
	followSetting(ctx, p.cli, p.o, &p.streams, "policy", registry.PolicyKey(p.o.prefix, service), registry.UnmarshalPolicy, samePolicy, ch)
}

// samePolicy reports whether two stored policy values hold the same
// policy, whoever set them and whenever.
func samePolicy(prev, cur []byte) bool {
	a, errA := registry.UnmarshalPolicy(prev)
	b, errB := registry.UnmarshalPolicy(cur)
	return errA == nil && errB == nil && a.Equal(b)
}

// WatchPolicyInfo is WatchPolicy with who set the policy and when, for a
// view of the registry (the console): each stored value is sent, a change
// of SetBy or SetAt alone too. A value that does not decode is logged and
// read as no policy (the zero PolicyInfo).
func (p *Policies) WatchPolicyInfo(ctx context.Context, service string) <-chan registry.PolicyInfo {
	ch := make(chan registry.PolicyInfo, 1)
	go followSetting(ctx, p.cli, p.o, &p.streams, "policy", registry.PolicyKey(p.o.prefix, service), registry.UnmarshalPolicyInfo, nil, ch)
	return ch
}
