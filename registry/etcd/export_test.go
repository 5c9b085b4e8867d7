package etcd

import (
	"context"

	"github.com/musterhq/muster/registry"
)

// FollowPolicy sends the policies of service on ch as WatchPolicy does,
// until ctx ends; then it closes ch. Given an unbuffered channel, a test
// receives every value sent, none coalesced away.
func FollowPolicy(p *Policies, ctx context.Context, service string, ch chan registry.Policy) {
	p.follow(ctx, service, ch)
}
